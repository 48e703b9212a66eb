"""The tool loop through the real runtime (SPEC §4.6): the respond model calls the agent's own
tools, each call and each round-trip a durable DBOS step and a metered usage record; failures
become results the model reads; loop breakers stop runaway loops and are recorded; the
heartbeat acts through the same tools."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo

from persyn.channels.base import Channel as ChannelPort
from persyn.cognition.reflection import SelfAssessment
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable
from persyn.runtime.app import DELIBERATION_FLAG, Runtime
from persyn.runtime.autonomy import recent_activity
from persyn.store.base import GoalStatus
from persyn.testing.meter import RecordingAdapter
from persyn.testing.models import DoubleReply, last_user_text, registered_double

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(START))


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return []
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


class Mind:
    """Plays the respond model per scenario, from what the prompt and tool results show."""

    def __init__(self) -> None:
        self.scenario = "goal"
        self.seen_results: list[str] = []
        self.tool_names: list[list[str]] = []
        self.prompts: list[str] = []

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
        results = _returns(messages)
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
        return DoubleReply(text=last_user_text(messages))


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("toolsmith", instance):
        yield instance


class Channel(ChannelPort):
    service = "test"
    interactive = False

    def __init__(self) -> None:
        self.delivered: list[Outbound] = []

    async def deliver(self, outbound: Outbound) -> None:
        self.delivered.append(outbound)

    async def notice(self, event: Event, notice: Notice) -> None:
        return None

    def sink_for(self, event: Event) -> SinkCallable | None:
        return None


def _manual(extra: str) -> str:
    """These tests fire due reminders by hand on a moved clock: no DBOS schedule racing them
    (except where a test sets `tick_seconds` to exercise that schedule)."""
    if "tick_seconds" in extra:
        return extra
    if "[autonomy]" in extra:
        return extra.replace("[autonomy]\n", "[autonomy]\nschedule = false\n")
    return extra + "[autonomy]\nschedule = false\n"


async def _runtime(tmp_path: Path, extra: str = "") -> tuple[Runtime, Channel, RecordingAdapter]:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:toolsmith"\n[metering]\nevent_log = false\n'
        '[memory]\nembedder = "test:hash"\n[deliberation]\nenabled = false\n' + _manual(extra)
    )
    settings = load_settings(home, environ={}).model_copy(update={"agents": [AGENT]})
    adapter = RecordingAdapter()
    runtime = Runtime(settings, clock=ManualClock(START), extra_meter_adapters=[adapter])
    channel = Channel()
    runtime.channels["test"] = channel
    await runtime.start(workers=True)
    return runtime, channel, adapter


async def _say(runtime: Runtime, text: str) -> tuple[Event, Any]:
    now = runtime.clock.now()
    event = Event(
        id=new_id(now),
        agent_id=AGENT.id,
        service="test",
        channel="room",
        speaker=Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam"),
        text=text,
        received_at=now,
    )
    await runtime.submit(event)
    marker = await runtime.wait_marker(AGENT.id, event.id, timeout=60)
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(seconds=5))
    return event, marker


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
    runtime, channel, adapter = await _runtime(tmp_path)
    try:
        event, marker = await _say(runtime, "I want to learn Go someday.")
        assert marker.transmitted and marker.text == "I've set myself a goal: learning Go."
        (goal,) = await runtime.store.list_goals(AGENT.id)
        assert goal.description == "Learn to play Go" and goal.status is GoalStatus.OPEN
        assert "create_goal" in mind.tool_names[0] and "message_contact" in mind.tool_names[0]
        assert '"description":"Learn to play Go"' in mind.seen_results[0]
        steps = _steps(tmp_path, event.id)
        assert steps.count("persyn.tool_call") == 1 and steps.count("persyn.respond_more") == 1
        assert runtime.meter.flush()
        assert [r.stage for r in adapter.records if r.thread_id == event.id] == ["respond", "respond"]
        trace = json.loads(await runtime.store.get_flag(AGENT.id, DELIBERATION_FLAG + event.id) or "{}")
        assert trace["tools"] == [{"name": "create_goal", "status": "ok"}]
        assert [o.text for o in channel.delivered] == [marker.text]
        # The goal it set itself is standing context from the very next turn.
        mind.scenario = "plain"
        await _say(runtime, "Anything new?")
        assert "My open goals" in mind.prompts[-1] and "Learn to play Go" in mind.prompts[-1]
    finally:
        await runtime.stop()


async def test_a_failing_tool_call_is_a_result_the_model_reads(tmp_path: Path, mind: Mind) -> None:
    runtime, _, _ = await _runtime(tmp_path)
    mind.scenario = "broken"
    try:
        _, marker = await _say(runtime, "What is 2 + 2?")
        assert marker.transmitted and "2 + 2 = 4" in (marker.text or "")
        assert "description" in mind.seen_results[0]  # the validation error, named
        assert await runtime.store.list_goals(AGENT.id) == []
    finally:
        await runtime.stop()


async def test_loop_breakers_stop_a_runaway_and_are_recorded(tmp_path: Path, mind: Mind) -> None:
    runtime, _, adapter = await _runtime(tmp_path, "[tools]\nmax_round_trips = 3\nmax_identical_calls = 2\n")
    mind.scenario = "runaway"
    try:
        event, marker = await _say(runtime, "Add one and one, forever.")
        assert marker.transmitted and (marker.text or "").startswith("(I used calculate, but could not put")
        trace = json.loads(await runtime.store.get_flag(AGENT.id, DELIBERATION_FLAG + event.id) or "{}")
        reasons = {trip["reason"] for trip in trace["trips"]}
        assert reasons == {"repeated_call", "max_round_trips"}
        statuses = [t["status"] for t in trace["tools"]]
        assert statuses[:2] == ["ok", "ok"] and "breaker_tripped" in statuses
        assert runtime.meter.flush()
        calls = [r for r in adapter.records if r.thread_id == event.id]
        assert len(calls) <= 3 + 2  # bounded: max_round_trips + 2 model calls at most
        assert _steps(tmp_path, event.id).count("persyn.tool_call") == 2  # refused calls never ran
    finally:
        await runtime.stop()


async def test_the_heartbeat_acts_by_messaging_a_contact(tmp_path: Path, mind: Mind) -> None:
    runtime, channel, _ = await _runtime(tmp_path)
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        await _say(runtime, "Hi, I'm Sam.")  # Sam is a contact now, last seen on test:room
        channel.delivered.clear()
        mind.scenario = "outreach"
        clock.advance(timedelta(hours=1))
        for _ in range(200):  # the message's workflow has finished: the beat is not skipped as busy
            if not await runtime.busy(AGENT.id):
                break
            await asyncio.sleep(0.05)
        assert await runtime.autonomy.fire_due() == 1  # the heartbeat

        async def acted() -> bool:
            return bool(await recent_activity(runtime.store, AGENT.id))

        for _ in range(200):
            if await acted():
                break
            await asyncio.sleep(0.05)
        (entry,) = await recent_activity(runtime.store, AGENT.id)
        assert entry.kind == "heartbeat" and entry.outcome == "said: I wrote to Sam."
        assert [(o.channel, o.text) for o in channel.delivered] == [("room", "How is chapter two going?")]
        dialog = await runtime.store.channel_messages(AGENT.id, "test", "room", 10)
        assert dialog[-1].text == "How is chapter two going?" and dialog[-1].speaker_name == "Ada"
    finally:
        await runtime.stop()


async def test_messages_the_agent_initiates_are_capped_per_channel(tmp_path: Path, mind: Mind) -> None:
    runtime, channel, _ = await _runtime(tmp_path, "[autonomy]\nchannel_message_tokens = 10\n")
    try:
        await _say(runtime, "Hi, I'm Sam.")
        channel.delivered.clear()
        mind.scenario = "outreach"
        await _say(runtime, "Please check in with me.")  # 6 tokens: sent
        await _say(runtime, "And once more.")  # 6 more would pass 10 in 24 hours: refused
        sent = [o.text for o in channel.delivered if o.text == "How is chapter two going?"]
        assert len(sent) == 1
        assert any(
            "not sent: I have initiated 6 of my 10 tokens on test:room" in r for r in mind.seen_results
        )
    finally:
        await runtime.stop()


async def test_a_reminder_set_in_conversation_reaches_the_person_unprompted(
    tmp_path: Path, mind: Mind
) -> None:
    runtime, channel, _ = await _runtime(tmp_path, "[autonomy]\nheartbeat_minutes = 1440\n")
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    mind.scenario = "remind"
    try:
        _, marker = await _say(runtime, "Remind me to take a walk in ten minutes.")
        assert marker.text == "I'll remind you in ten minutes.", mind.seen_results
        channel.delivered.clear()
        clock.advance(timedelta(minutes=11))
        for _ in range(200):
            if not await runtime.busy(AGENT.id):
                break
            await asyncio.sleep(0.05)
        assert await runtime.autonomy.fire_due() == 1, (
            mind.seen_results,
            await runtime.store.list_reminders(AGENT.id),
        )
        for _ in range(200):
            if channel.delivered:
                break
            await asyncio.sleep(0.05)
        # Unprompted, on the channel it was set on, to the person who asked.
        assert [(o.service, o.channel, o.text) for o in channel.delivered] == [
            ("test", "room", "Sam, time for your walk!")
        ]
        assert await runtime.store.list_reminders(AGENT.id) == []  # one-shot: gone
    finally:
        await runtime.stop()


async def test_the_tools_offered_are_described_the_same_for_every_agent_channel_and_run(
    tmp_path: Path, mind: Mind
) -> None:
    """The runtime builds the offered tool definitions once per process: that is only right
    while no channel or kind of run (nor agent: the registry takes nothing else of one but
    its id) changes a tool's name, description or schema."""
    from persyn.cognition.pipeline import TurnSetup

    runtime, _channel, _adapter = await _runtime(tmp_path)
    try:
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
                (AGENT.id, "test", "room", new_id(START), "message"),
                (AGENT.id, "terminal", "terminal", new_id(START), "message"),
                (AGENT.id, "heartbeat", "self", None, "heartbeat"),
            ]
        ]
        described = [runtime.tool_registry(setup, setup.event_id).specs() for setup in setups]
        assert len(described[0]) > 10
        assert described[1] == described[0] and described[2] == described[0]
        assert runtime.tool_specs(setups[1], setups[1].event_id) == described[0]
    finally:
        await runtime.stop()
