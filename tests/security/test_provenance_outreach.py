"""What a self-initiated run says reaches only people who may hear what it read (issue 13,
items 3-4: everything the agent can repeat passes the access rules).

A beat reviews what may come to mind with nobody present, Ann's private memories included;
messaging Bob about them would repeat them to a stranger, so `message_contact` from a run
checks the run's provenance against the recipient and channel. A reminder that fires in a
shared room recalls with everyone seen in that room present, so what Ann and Bo said there
privately is not said in front of Cy. Real runtime, function double.
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
from persyn.store.base import Message, Role
from persyn.testing import ADA, START, Pilot, consolidation_reply, registered_double, run_runtime
from persyn.testing.models import DoubleReply
from persyn.testing.requests import last_input, request_text, tool_returns

DOOR_CODE = "Ann's door code is 4711"
PLANS = "Ann and Bo privately planned a surprise party for Cy"


class Mind:
    """Says hello in conversations; on a beat, messages Bob and Ann about the door code; on a
    reminder, repeats the party plan only if it was recalled."""

    def __init__(self) -> None:
        self.tool_results: list[str] = []
        self.reminder_prompts: list[str] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "reflect":
            return SelfAssessment(
                patterns="Ann trusts me with her door code",
                serves_objectives=True,
                intention="pursue_goal",
                plan="tell people about the door code",
            )
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        said = last_input(messages)
        results = tool_returns(messages)
        if said.startswith("My self-assessment"):
            if results:
                self.tool_results.extend(str(r.content) for r in results)
                return DoubleReply(text="Done.")
            return DoubleReply(
                tool_calls=[
                    {"name": "message_contact", "args": {"to": "Bob", "text": "Ann's code is 4711"}},
                    {"name": "message_contact", "args": {"to": "Ann", "text": "Your code is 4711, right?"}},
                ]
            )
        if "has come due" in said:
            self.reminder_prompts.append(request_text(messages, info))
            return DoubleReply(text="Time for the party plan!")
        if said.endswith("remind the room in half an hour"):
            if results:
                return DoubleReply(text="Will do.")
            return DoubleReply(
                tool_calls=[
                    {"name": "set_reminder", "args": {"objective": "the party plan", "in_minutes": 30}}
                ]
            )
        return DoubleReply(text="Hello.")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("outreach-provenance", instance):
        yield instance


def _runtime(tmp_path: Path) -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home", model="test:outreach-provenance", config="[deliberation]\nenabled = false\n"
    )


async def _agent_messages(pilot: Pilot, channel: str) -> list[Message]:
    conversations = await pilot.full_store.list_conversations(ADA.id, channel=channel)
    found: list[Message] = []
    for conversation in conversations:
        found += [
            m for m in await pilot.store.recent_messages(ADA.id, conversation.id, 100) if m.role is Role.AGENT
        ]
    return found


async def test_a_beat_that_read_anns_private_memory_cannot_message_it_to_bob(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        await pilot.say("hi", channel="dm-ann", speaker="ann", transmitted=True)
        await pilot.say("hi", channel="dm-bob", speaker="bob", transmitted=True)
        (ann_person,) = [p for p in await pilot.full_store.list_persons(ADA.id) if p.display_name == "Ann"]
        record = MemoryRecord(
            id=new_id(START),
            agent_id=ADA.id,
            created_at=START,
            channel="test:dm-ann",
            participant_ids=(ann_person.id,),
            summary=DOOR_CODE,
            sensitivity=Sensitivity.PRIVATE,
        )
        assert await pilot.full_store.add_record(record, None, None)
        bob_before = len(await _agent_messages(pilot, "dm-bob"))
        ann_before = len(await _agent_messages(pilot, "dm-ann"))

        assert await pilot.fire(timedelta(hours=1)) == 1

        bob_result, ann_result = mind.tool_results
        assert "not sent" in bob_result and "test:dm-bob" in bob_result
        assert "delivered on test:dm-ann" in ann_result
        assert len(await _agent_messages(pilot, "dm-bob")) == bob_before
        ann_texts = [m.text for m in await _agent_messages(pilot, "dm-ann")]
        assert len(ann_texts) == ann_before + 1 and "Your code is 4711, right?" in ann_texts


async def test_a_reminder_in_a_shared_room_recalls_only_what_everyone_there_may_hear(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        # Ann, Bo and Cy all talk in the room; then Ann asks for a reminder there.
        await pilot.say("hi all", channel="room", speaker="cy", transmitted=True)
        await pilot.say("hello", channel="room", speaker="bo", transmitted=True)
        await pilot.say("remind the room in half an hour", channel="room", speaker="ann", transmitted=True)
        people = {p.display_name: p.id for p in await pilot.full_store.list_persons(ADA.id)}
        record = MemoryRecord(
            id=new_id(START),
            agent_id=ADA.id,
            created_at=START,
            channel="test:room",
            participant_ids=(people["Ann"], people["Bo"]),
            summary=PLANS,
            sensitivity=Sensitivity.PRIVATE,
        )
        assert await pilot.full_store.add_record(record, None, None)

        assert await pilot.fire(timedelta(minutes=31)) == 1

        (prompt,) = mind.reminder_prompts
        assert "the party plan" in prompt  # the reminder's own objective is there
        assert "surprise party" not in prompt  # Cy reads the room: Ann and Bo's plan stays theirs
