"""The heartbeat and reminder runs respect compartments (issue 13, item 4).

The heartbeat reviews only what may come to mind with nobody present: a restricted record
formed with others never reaches the reflect prompt. What a beat (or a reminder's run)
writes — its activity entry, a goal — carries the provenance of what it read, so a beat
that read Ann's private record, or a reminder Ann set in her DM, does not show through
`recent_activity` or `list_goals` to Mallory on another channel. Real runtime, scripted
model double.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from provenance_runtime import (
    AGENT,
    START,
    background_reply,
    fire,
    last_input,
    request_text,
    say,
    start_runtime,
    tool_returns,
)
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.runtime.app import Runtime
from persyn.runtime.autonomy import recent_activity
from persyn.store import Identity
from persyn.testing.models import DoubleReply, registered_double

ANN, BO = new_id(START), new_id(START)
MERGER = "Ann and Bo told me in confidence about the merger"
DOOR_CODE = "Ann's door code is 4711"
MUSING = "I mused alone that I talk too much"
SALARY = "Bo told me alone that Bo earns 90k"

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
            return background_reply(task) or DoubleReply(text="ok")
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


def _record(
    channel: str, participants: tuple[str, ...], sensitivity: Sensitivity, summary: str
) -> MemoryRecord:
    return MemoryRecord(
        id=new_id(START),
        agent_id=AGENT.id,
        created_at=START,
        channel=channel,
        participant_ids=participants,
        summary=summary,
        sensitivity=sensitivity,
    )


async def _remember(runtime: Runtime) -> None:
    for record in (
        _record("test:room", (ANN, BO), Sensitivity.RESTRICTED, MERGER),
        _record("test:dm-ann", (ANN,), Sensitivity.PRIVATE, DOOR_CODE),
        _record("test:notes", (), Sensitivity.RESTRICTED, MUSING),
    ):
        assert await runtime.store.add_record(record, None, None)


async def test_a_restricted_record_formed_with_others_never_reaches_the_reflect_prompt(
    tmp_path: Path, mind: Mind
) -> None:
    runtime = await start_runtime(tmp_path, "heartbeat-provenance")
    try:
        await _remember(runtime)
        await fire(runtime, timedelta(hours=1))
        (prompt,) = mind.reflect_requests
        assert "merger" not in prompt
        # What may come to mind alone is reviewed: private records, and restricted ones
        # formed with nobody but the agent.
        assert DOOR_CODE in prompt and MUSING in prompt
    finally:
        await runtime.stop()


async def test_what_a_beat_wrote_after_reading_a_private_record_does_not_show_to_a_stranger(
    tmp_path: Path, mind: Mind
) -> None:
    runtime = await start_runtime(tmp_path, "heartbeat-provenance")
    try:
        await _remember(runtime)
        await fire(runtime, timedelta(hours=1))
        (entry,) = await recent_activity(runtime.store, AGENT.id)
        assert "4711" in entry.outcome  # the operator's log has it...
        (goal,) = await runtime.store.list_goals(AGENT.id)
        assert "4711" in goal.description

        await say(runtime, "lobby", "mallory", "mallory: what have you been up to?")
        shown = "\n".join(mind.results["mallory"])
        assert len(mind.results["mallory"]) == len(ASK)
        assert "4711" not in shown  # ...Mallory's tools do not

        # The beat's own memory is at least as sensitive as the most sensitive thing it read
        # (the restricted musing), so it too stays with the agent alone.
        reflections: list[MemoryRecord] = []
        for _ in range(600):
            reflections = [r for r in await runtime.store.list_records(AGENT.id) if r.kind == "reflection"]
            if reflections:
                break
            await asyncio.sleep(0.05)
        (memory,) = reflections
        assert memory.sensitivity is Sensitivity.RESTRICTED and memory.participant_ids == ()
    finally:
        await runtime.stop()


async def test_a_reminder_run_carries_the_provenance_of_the_reminder(tmp_path: Path, mind: Mind) -> None:
    runtime = await start_runtime(tmp_path, "heartbeat-provenance")
    try:
        await say(runtime, "dm-ann", "ann", "ann-sets: remind me to buy the ring in half an hour")
        await fire(runtime, timedelta(minutes=31))  # the reminder, on Ann's DM (before the beat)
        (entry,) = await recent_activity(runtime.store, AGENT.id)
        assert (
            entry.kind == "reminder" and "engagement ring" in entry.objective and "jeweller" in entry.outcome
        )

        await say(runtime, "lobby", "mallory", "mallory: what have you been up to?")
        shown = "\n".join(mind.results["mallory"])
        assert "engagement ring" not in shown and "jeweller" not in shown
        await say(runtime, "dm-ann", "ann", "ann: what have you been up to?")
        assert "jeweller" in "\n".join(mind.results["ann"])  # where it was set, it shows
    finally:
        await runtime.stop()


async def test_a_reminder_run_in_a_room_does_not_recall_what_someone_else_said_alone(
    tmp_path: Path, mind: Mind
) -> None:
    """Ann sets a reminder in the room; when it fires there, the run speaks in front of the
    room's people (Ann), so what Bo told the agent alone in that room does not come to mind:
    it is neither said nor written where Ann can read it."""
    runtime = await start_runtime(tmp_path, "heartbeat-provenance")
    try:
        await say(runtime, "room", "ann", "ann-sets: remind me to buy the ring in half an hour")
        bo = await runtime.store.resolve_person(
            AGENT.id, Identity(service="test", channel="room", speaker_id="bo"), "Bo", "human", START
        )
        record = _record("test:room", (bo.id,), Sensitivity.PRIVATE, SALARY)
        assert await runtime.store.add_record(record, None, None)
        await fire(runtime, timedelta(minutes=31))
        (entry,) = await recent_activity(runtime.store, AGENT.id)
        assert entry.outcome == "said: Ann, off to the jeweller now!"

        await say(runtime, "room", "ann", "ann: what have you been up to?")
        assert len(mind.results["ann"]) == len(ASK)
        assert "90k" not in "\n".join(mind.results["ann"])
    finally:
        await runtime.stop()
