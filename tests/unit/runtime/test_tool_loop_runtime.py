"""The tool loop through the real runtime (SPEC §4.6): the respond model calls the agent's own
tools, each call and each round-trip a durable DBOS step and a metered usage record; failures
become results the model reads; loop breakers stop runaway loops and are recorded; the
heartbeat acts through the same tools."""

from __future__ import annotations

import sqlite3
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
from persyn.store.base import GoalStatus
from persyn.store.ports.activity import REMEMBER_HARDER_KIND
from persyn.testing import ADA, START, Pilot, run_runtime, tool_returns
from persyn.testing.models import DoubleReply, last_user_text, registered_double


class Mind:
    """Plays the respond model per scenario, from what the prompt and tool results show."""

    def __init__(self) -> None:
        self.scenario = "goal"
        self.seen_results: list[str] = []
        self.tool_names: list[list[str]] = []
        self.prompts: list[str] = []
        self.memory_id = ""  # the memory "remember" pulls the dialog behind

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "reflect":
            return SelfAssessment(
                patterns="I promised Sam a follow-up",
                serves_objectives=True,
                intention="message_contact",
                plan="write to Sam about chapter two",
            )
        if task != "respond":
            return DoubleReply(text="ok")
        self.tool_names.append(sorted(t.name for t in info.function_tools))
        self.prompts.append(info.instructions or "")
        results = tool_returns(messages)
        self.seen_results += [str(r.content) for r in results]
        if self.scenario == "goal":
            if not results:
                return DoubleReply(
                    text="Let me note that.",
                    tool_calls=[{"name": "create_goal", "args": {"description": "Learn to play Go"}}],
                )
            return DoubleReply(text="I've set myself a goal: learning Go.")
        if self.scenario == "broken":
            if not results:
                return DoubleReply(tool_calls=[{"name": "create_goal", "args": {"nonsense": 1}}])
            return DoubleReply(text="That tool call was malformed; I'll answer directly: 2 + 2 = 4.")
        if self.scenario == "runaway":  # the same call again and again
            return DoubleReply(tool_calls=[{"name": "calculate", "args": {"expression": "1+1"}}])
        if self.scenario == "remind":
            if "has come due" in last_user_text(messages):
                return DoubleReply(text="Sam, time for your walk!")
            if not results:
                return DoubleReply(
                    tool_calls=[
                        {"name": "set_reminder", "args": {"objective": "tell Sam to walk", "in_minutes": 10}}
                    ]
                )
            return DoubleReply(text="I'll remind you in ten minutes.")
        if self.scenario == "outreach":
            if not results:
                return DoubleReply(
                    tool_calls=[
                        {
                            "name": "message_contact",
                            "args": {"to": "Sam", "text": "How is chapter two going?"},
                        }
                    ]
                )
            return DoubleReply(text="I wrote to Sam.")
        if self.scenario == "remember":
            if not results:
                return DoubleReply(
                    tool_calls=[{"name": "recall_dialog", "args": {"memory_id": self.memory_id}}]
                )
            return DoubleReply(text="You said it twice, word for word.")
        return DoubleReply(text=last_user_text(messages))


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("toolsmith", instance):
        yield instance


def _runtime(tmp_path: Path, extra: str = "") -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home", model="test:toolsmith", config="[deliberation]\nenabled = false\n" + extra
    )


def _steps(tmp_path: Path, workflow_id: str) -> list[str]:
    with sqlite3.connect(tmp_path / "home" / "data" / "dbos.sqlite") as db:
        rows = db.execute(
            "SELECT function_name FROM operation_outputs WHERE workflow_uuid = ? ORDER BY function_id",
            (workflow_id,),
        ).fetchall()
    return [row[0] for row in rows]


async def test_the_model_uses_a_tool_then_answers_each_step_durable_and_metered(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        event, marker = await pilot.say("I want to learn Go someday.")
        assert marker.transmitted and marker.text == "I've set myself a goal: learning Go."
        (goal,) = await pilot.full_store.list_goals(ADA.id)
        assert goal.description == "Learn to play Go" and goal.status is GoalStatus.OPEN
        assert "create_goal" in mind.tool_names[0] and "message_contact" in mind.tool_names[0]
        assert '"description":"Learn to play Go"' in mind.seen_results[0]
        steps = _steps(tmp_path, event.id)
        assert steps.count("persyn.tool_call") == 1 and steps.count("persyn.respond_more") == 1
        assert [r.stage for r in pilot.usage() if r.thread_id == event.id] == ["respond", "respond"]
        trace = (await pilot.store.deliberation_traces(ADA.id, [event.id]))[0].trace
        assert trace["tools"] == [{"name": "create_goal", "status": "ok"}]
        assert [o.text for o in pilot.channel.delivered] == [marker.text]
        # The goal it set itself is standing context from the very next turn.
        mind.scenario = "plain"
        await pilot.say("Anything new?")
        assert "My open goals" in mind.prompts[-1] and "Learn to play Go" in mind.prompts[-1]


async def test_a_failing_tool_call_is_a_result_the_model_reads(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path) as pilot:
        mind.scenario = "broken"
        _, marker = await pilot.say("What is 2 + 2?")
        assert marker.transmitted and "2 + 2 = 4" in (marker.text or "")
        assert "description" in mind.seen_results[0]  # the validation error, named
        assert await pilot.full_store.list_goals(ADA.id) == []


async def test_loop_breakers_stop_a_runaway_and_are_recorded(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path, "[tools]\nmax_round_trips = 3\nmax_identical_calls = 2\n") as pilot:
        mind.scenario = "runaway"
        event, marker = await pilot.say("Add one and one, forever.")
        assert marker.transmitted and (marker.text or "").startswith("(I used calculate, but could not put")
        trace = (await pilot.store.deliberation_traces(ADA.id, [event.id]))[0].trace
        reasons = {trip["reason"] for trip in trace["trips"]}
        assert reasons == {"repeated_call", "max_round_trips"}
        statuses = [t["status"] for t in trace["tools"]]
        assert statuses[:2] == ["ok", "ok"] and "breaker_tripped" in statuses
        calls = [r for r in pilot.usage() if r.thread_id == event.id]
        assert len(calls) <= 3 + 2  # bounded: max_round_trips + 2 model calls at most
        assert _steps(tmp_path, event.id).count("persyn.tool_call") == 2  # refused calls never ran


async def test_the_heartbeat_acts_by_messaging_a_contact(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path) as pilot:
        await pilot.say("Hi, I'm Sam.")  # Sam is a contact now, last seen on test:room
        pilot.channel.delivered.clear()
        mind.scenario = "outreach"
        # Fired once the message's workflow has finished (the beat is not skipped as busy).
        assert await pilot.fire(timedelta(hours=1)) == 1  # the heartbeat
        (entry,) = await recent_activity(pilot.full_store, ADA.id)
        assert entry.kind == "heartbeat" and entry.outcome == "said: I wrote to Sam."
        assert [(o.channel, o.text) for o in pilot.channel.delivered] == [
            ("room", "How is chapter two going?")
        ]
        dialog = await pilot.store.channel_messages(ADA.id, "test", "room", 10)
        assert dialog[-1].text == "How is chapter two going?" and dialog[-1].speaker_name == "Ada"


async def test_messages_the_agent_initiates_are_capped_per_channel(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path, "[autonomy]\nchannel_message_tokens = 10\n") as pilot:
        await pilot.say("Hi, I'm Sam.")
        pilot.channel.delivered.clear()
        mind.scenario = "outreach"
        await pilot.say("Please check in with me.")  # 6 tokens: sent
        await pilot.say("And once more.")  # 6 more would pass 10 in 24 hours: refused
        sent = [o.text for o in pilot.channel.delivered if o.text == "How is chapter two going?"]
        assert len(sent) == 1
        assert any(
            "not sent: I have initiated 6 of my 10 tokens on test:room" in r for r in mind.seen_results
        )


async def test_a_reminder_set_in_conversation_reaches_the_person_unprompted(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path, "[autonomy]\nheartbeat_minutes = 1440\n") as pilot:
        mind.scenario = "remind"
        _, marker = await pilot.say("Remind me to take a walk in ten minutes.")
        assert marker.text == "I'll remind you in ten minutes.", mind.seen_results
        pilot.channel.delivered.clear()
        assert await pilot.fire(timedelta(minutes=11)) == 1, (
            mind.seen_results,
            await pilot.full_store.list_reminders(ADA.id),
        )
        # Unprompted, on the channel it was set on, to the person who asked.
        assert [(o.service, o.channel, o.text) for o in pilot.channel.delivered] == [
            ("test", "room", "Sam, time for your walk!")
        ]
        assert await pilot.full_store.list_reminders(ADA.id) == []  # one-shot: gone


async def test_the_tools_offered_are_described_the_same_for_every_agent_channel_and_run(
    tmp_path: Path, mind: Mind
) -> None:
    """The runtime builds the offered tool definitions once per process: that is only right
    while no channel or kind of run (nor agent: the registry takes nothing else of one but
    its id) changes a tool's name, description or schema."""
    from persyn.cognition.pipeline import TurnSetup

    async with _runtime(tmp_path) as pilot:
        setups = [
            TurnSetup(
                agent_id=agent_id,
                event_id=new_id(START),
                service=service,
                channel=channel,
                conversation_id=new_id(START),
                person_id=person_id,
                speaker_name="Sam",
                inbound_message_id=new_id(START),
                received_at=START,
                kind=kind,
                participant_ids=(person_id,) if person_id else (),
            )
            for agent_id, service, channel, person_id, kind in [
                (ADA.id, "test", "room", new_id(START), "message"),
                (ADA.id, "terminal", "terminal", new_id(START), "message"),
                (ADA.id, "heartbeat", "self", None, "heartbeat"),
            ]
        ]
        described = [pilot.runtime.tools.registry(setup, setup.event_id).specs() for setup in setups]
        assert len(described[0]) >= 8 and "call_tool" in {spec.name for spec in described[0]}
        assert described[1] == described[0] and described[2] == described[0]
        assert pilot.runtime.tools.specs(setups[1], setups[1].event_id) == described[0]


async def test_remembering_harder_is_an_event_in_the_activity_log(tmp_path: Path, mind: Mind) -> None:
    """The agent pulling the dialog behind a memory (`recall_dialog`) is logged, as visible
    as the memory, for the operator's memory events; a turn that pulls nothing logs nothing."""
    mind.scenario = "plain"
    async with _runtime(tmp_path) as pilot:
        await pilot.say("The boat is called Marguerite.")
        conversation_id = pilot.channel.delivered[-1].conversation_id
        said = await pilot.full_store.recent_messages(ADA.id, conversation_id, 10)
        record = MemoryRecord(
            id=new_id(START),
            agent_id=ADA.id,
            created_at=START,
            channel="test:room",
            summary="Sam named the boat.",
            sensitivity=Sensitivity.PUBLIC,
            conversation_id=conversation_id,
            message_ids=tuple(m.id for m in said),
        )
        await pilot.full_store.add_record(record, None, None)
        assert await pilot.full_store.recent_activity(ADA.id, limit=10, kind=REMEMBER_HARDER_KIND) == []
        mind.scenario, mind.memory_id = "remember", record.id
        _, marker = await pilot.say("What exactly did I call the boat?")
        assert marker.text == "You said it twice, word for word.", mind.seen_results
        assert "Marguerite" in mind.seen_results[-1], mind.seen_results
        (entry,) = await pilot.full_store.recent_activity(ADA.id, limit=10, kind=REMEMBER_HARDER_KIND)
    assert entry.objective == f"remember harder: memory {record.id}"
    assert entry.outcome == f"read {len(said)} lines of the dialog behind “Sam named the boat.”"
    assert entry.conversation_id == conversation_id and entry.tokens == 0
    assert (entry.provenance.channel, entry.provenance.sensitivity) == ("test:room", Sensitivity.PUBLIC)
