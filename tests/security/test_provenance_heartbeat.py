"""The heartbeat and reminder runs respect compartments (issue 13, item 4).

The heartbeat reviews only what may come to mind with nobody present: a restricted record
formed with others never reaches the reflect prompt. What a beat (or a reminder's run)
writes — its activity entry, a goal — carries the provenance of what it read, so a beat
that read Ann's private record, or a reminder Ann set in her DM, does not show through
`recent_activity` or `list_goals` to Mallory on another channel. Real runtime, scripted
model double.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.runtime.background.autonomy import recent_activity
from persyn.store import Identity
from persyn.testing import ADA, START, Pilot, consolidation_reply, registered_double, run_runtime
from persyn.testing.models import DoubleReply
from persyn.testing.requests import last_input, request_text, tool_returns

ANN, BO = new_id(START), new_id(START)
MERGER = "Ann and Bo told me in confidence about the merger"
DOOR_CODE = "Ann's door code is 4711"
MUSING = "I mused alone that I talk too much"
SALARY = "Bo told me alone that Bo earns 90k"
ANN_SETS_A_REMINDER = "ann-sets: remind me to buy the ring in half an hour"

ASK = [{"name": "recent_activity", "args": {}}, {"name": "list_goals", "args": {"include_closed": True}}]


class Mind:
    def __init__(self) -> None:
        self.reflect_requests: list[str] = []
        self.results: dict[str, list[str]] = {}
        self.speaking = ""

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "reflect":
            self.reflect_requests.append(request_text(messages, info))
            return SelfAssessment(
                patterns="Ann trusts me with her door code 4711",
                serves_objectives=True,
                intention="pursue_goal",
                plan="keep the door code 4711 in mind for Ann",
            )
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        said = last_input(messages)
        results = tool_returns(messages)
        if said.startswith("My self-assessment"):  # the beat acts on its assessment
            if results:
                return DoubleReply(text="I will remember 4711 for Ann.")
            return DoubleReply(
                tool_calls=[
                    {"name": "create_goal", "args": {"description": "Check 4711 still works for Ann"}}
                ]
            )
        if "has come due" in said:  # Ann's reminder
            if SALARY in (info.instructions or ""):  # it recalled what Bo told it alone
                return DoubleReply(text="Ann, remember: Bo earns 90k.")
            return DoubleReply(text="Ann, off to the jeweller now!")
        if not results:  # a new input (a continuation repeats no input)
            self.speaking = said.split(":")[0]
        who = self.speaking
        self.results.setdefault(who, []).extend(str(r.content) for r in results)
        if results:
            return DoubleReply(text="Done.")
        if who == "ann-sets":
            return DoubleReply(
                tool_calls=[
                    {
                        "name": "set_reminder",
                        "args": {"objective": "Buy the engagement ring", "in_minutes": 30},
                    }
                ]
            )
        return DoubleReply(tool_calls=ASK)


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("heartbeat-provenance", instance):
        yield instance


def _runtime(tmp_path: Path) -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home", model="test:heartbeat-provenance", config="[deliberation]\nenabled = false\n"
    )


def _record(
    channel: str, participants: tuple[str, ...], sensitivity: Sensitivity, summary: str
) -> MemoryRecord:
    return MemoryRecord(
        id=new_id(START),
        agent_id=ADA.id,
        created_at=START,
        channel=channel,
        participant_ids=participants,
        summary=summary,
        sensitivity=sensitivity,
    )


async def _remember(pilot: Pilot) -> None:
    for record in (
        _record("test:room", (ANN, BO), Sensitivity.RESTRICTED, MERGER),
        _record("test:dm-ann", (ANN,), Sensitivity.PRIVATE, DOOR_CODE),
        _record("test:notes", (), Sensitivity.RESTRICTED, MUSING),
    ):
        assert await pilot.full_store.add_record(record, None, None)


async def test_a_restricted_record_formed_with_others_never_reaches_the_reflect_prompt(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        await _remember(pilot)
        assert await pilot.fire(timedelta(hours=1)) == 1
        (prompt,) = mind.reflect_requests
        assert "merger" not in prompt
        # What may come to mind alone is reviewed: private records, and restricted ones
        # formed with nobody but the agent.
        assert DOOR_CODE in prompt and MUSING in prompt


async def test_what_a_beat_wrote_after_reading_a_private_record_does_not_show_to_a_stranger(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        await _remember(pilot)
        assert await pilot.fire(timedelta(hours=1)) == 1
        (entry,) = await recent_activity(pilot.full_store, ADA.id)
        assert "4711" in entry.outcome  # the operator's log has it...
        (goal,) = await pilot.full_store.list_goals(ADA.id)
        assert "4711" in goal.description

        await pilot.say(
            "mallory: what have you been up to?", channel="lobby", speaker="mallory", transmitted=True
        )
        shown = "\n".join(mind.results["mallory"])
        assert len(mind.results["mallory"]) == len(ASK)
        assert "4711" not in shown  # ...Mallory's tools do not

        # The beat's own memory is at least as sensitive as the most sensitive thing it read
        # (the restricted musing), so it too stays with the agent alone.
        await pilot.settle()
        (memory,) = [r for r in await pilot.full_store.list_records(ADA.id) if r.kind == "reflection"]
        assert memory.sensitivity is Sensitivity.RESTRICTED and memory.participant_ids == ()


async def test_a_reminder_run_carries_the_provenance_of_the_reminder(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path) as pilot:
        await pilot.say(ANN_SETS_A_REMINDER, channel="dm-ann", speaker="ann", transmitted=True)
        assert await pilot.fire(timedelta(minutes=31)) == 1  # the reminder, on Ann's DM (before the beat)
        (entry,) = await recent_activity(pilot.full_store, ADA.id)
        assert (
            entry.kind == "reminder" and "engagement ring" in entry.objective and "jeweller" in entry.outcome
        )

        await pilot.say(
            "mallory: what have you been up to?", channel="lobby", speaker="mallory", transmitted=True
        )
        shown = "\n".join(mind.results["mallory"])
        assert "engagement ring" not in shown and "jeweller" not in shown
        await pilot.say("ann: what have you been up to?", channel="dm-ann", speaker="ann", transmitted=True)
        assert "jeweller" in "\n".join(mind.results["ann"])  # where it was set, it shows


async def test_a_reminder_run_in_a_room_does_not_recall_what_someone_else_said_alone(
    tmp_path: Path, mind: Mind
) -> None:
    """Ann sets a reminder in the room; when it fires there, the run speaks in front of the
    room's people (Ann), so what Bo told the agent alone in that room does not come to mind:
    it is neither said nor written where Ann can read it."""
    async with _runtime(tmp_path) as pilot:
        await pilot.say(ANN_SETS_A_REMINDER, channel="room", speaker="ann", transmitted=True)
        bo = await pilot.store.resolve_person(
            ADA.id, Identity(service="test", channel="room", speaker_id="bo"), "Bo", "human", START
        )
        record = _record("test:room", (bo.id,), Sensitivity.PRIVATE, SALARY)
        assert await pilot.full_store.add_record(record, None, None)
        assert await pilot.fire(timedelta(minutes=31)) == 1
        (entry,) = await recent_activity(pilot.full_store, ADA.id)
        assert entry.outcome == "said: Ann, off to the jeweller now!"

        await pilot.say("ann: what have you been up to?", channel="room", speaker="ann", transmitted=True)
        assert len(mind.results["ann"]) == len(ASK)
        assert "90k" not in "\n".join(mind.results["ann"])
