"""Reminders, the heartbeat and their budgets through the real runtime (DBOS, SQLite, gateway,
meter) with a model double that plays the respond, reflect and consolidation stages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.core.clock import ManualClock, SystemClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import TokenUsage
from persyn.runtime.app import Runtime
from persyn.runtime.autonomy import recent_activity
from persyn.runtime.compose import build_runtime
from persyn.schedule import at_trigger, create_goal, heartbeat_status, interval_trigger, set_reminder
from persyn.store.base import Role
from persyn.testing.models import DoubleReply, last_user_text, registered_double

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(START), objectives=["help Sam finish the thesis"])


class Mind:
    def __init__(self) -> None:
        self.intention = "rest"
        self.respond_prompts: list[str] = []
        self.respond_inputs: list[str] = []
        self.respond_sleep = 0.0

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        said = last_user_text(messages)
        if task == "reflect":
            return SelfAssessment(
                patterns="I keep talking about the thesis",
                serves_objectives=True,
                intention=self.intention,  # type: ignore[arg-type]
                plan="ask Sam how chapter two is going"
                if self.intention != "rest"
                else "nothing calls for me",
            )
        if task == "respond":
            if self.respond_sleep:
                await asyncio.sleep(self.respond_sleep)
            self.respond_prompts.append(info.instructions or "")
            self.respond_inputs.append(said)
            return DoubleReply(
                text="Time to stretch, Sam!", usage=TokenUsage(input_tokens=40, output_tokens=10)
            )
        if task == "summarize":
            return DoubleReply(
                output={"summary": "My reminder fired and I told Sam to stretch.", "tags": ["health"]}
            )
        if task == "rate":
            scores = dict.fromkeys(
                (
                    "emotional_significance",
                    "decisions",
                    "novelty",
                    "continuing_themes",
                    "explicit_importance",
                ),
                3,
            )
            return DoubleReply(output={**scores, "importance": 4, "sensitivity": "private"})
        return DoubleReply(text="ok")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("autonomous", instance):
        yield instance


def _manual(extra: str) -> str:
    """These tests fire due reminders by hand on a moved clock: no DBOS schedule racing them
    (except where a test sets `tick_seconds` to exercise that schedule)."""
    if "tick_seconds" in extra:
        return extra
    if "[autonomy]" in extra:
        return extra.replace("[autonomy]\n", "[autonomy]\nschedule = false\n")
    return extra + "[autonomy]\nschedule = false\n"


async def _runtime(tmp_path: Path, extra: str = "", clock: Any = None) -> Runtime:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:autonomous"\n[metering]\nevent_log = false\n'
        '[memory]\nembedder = "test:hash"\n[deliberation]\nenabled = false\n' + _manual(extra)
    )
    settings = load_settings(home, environ={}).model_copy(update={"agents": [AGENT]})
    runtime = build_runtime(settings, clock=clock or ManualClock(START))
    await runtime.start(workers=True)
    return runtime


async def _markers(runtime: Runtime, event_ids: list[str]) -> list[Any]:
    return [await runtime.wait_marker(AGENT.id, event_id, timeout=30) for event_id in event_ids]


async def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


async def test_a_due_reminder_fires_once_through_the_pipeline_and_is_remembered(
    tmp_path: Path, mind: Mind
) -> None:
    runtime = await _runtime(tmp_path)
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        store = runtime.store
        reminder = await set_reminder(
            store, AGENT.id, "remind Sam to stretch", at_trigger(START + timedelta(minutes=5), START), START
        )
        assert await runtime.autonomy.fire_due() == 0  # not due yet
        clock.advance(timedelta(minutes=6))
        # Two schedulers see it due at once: the reminder fires once.
        fired = await asyncio.gather(runtime.autonomy.fire_due(), runtime.autonomy.fire_due())
        assert sum(fired) >= 1
        await _wait_for(lambda: _has_activity(runtime))
        (entry,) = await recent_activity(store, AGENT.id)
        assert entry.kind == "reminder" and entry.reminder_id == reminder.id
        assert entry.outcome == "said: Time to stretch, Sam!" and entry.tokens == 50
        assert await store.get_reminder(AGENT.id, reminder.id) is None  # one-shot: deleted
        assert mind.respond_inputs == ["My reminder (set 2026-11-30) has come due: remind Sam to stretch"]
        # Its own conversation, closed, consolidated into a memory linked to the reminder.
        assert entry.conversation_id is not None
        conversation = await store.get_conversation(AGENT.id, entry.conversation_id)
        assert (
            conversation is not None
            and conversation.closed_at is not None
            and conversation.kind == "reflection"
        )

        async def remembered() -> bool:
            return any(r.kind == "reminder" for r in await store.list_records(AGENT.id))

        await _wait_for(remembered)
        (memory,) = [r for r in await store.list_records(AGENT.id) if r.kind == "reminder"]
        assert f"reminder-{reminder.id}" in memory.tags and memory.channel == "self:reminders"
        assert await runtime.autonomy.fire_due() == 0
    finally:
        await runtime.stop()


async def _has_activity(runtime: Runtime) -> bool:
    return bool(await recent_activity(runtime.store, AGENT.id))


async def test_a_recurring_reminder_rolls_forward_and_sees_what_happened_last_time(
    tmp_path: Path, mind: Mind
) -> None:
    runtime = await _runtime(tmp_path, "[autonomy]\nheartbeat_minutes = 1440\n")  # no beat in the way
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        reminder = await set_reminder(
            runtime.store,
            AGENT.id,
            "check on the thesis",
            interval_trigger(3600, START + timedelta(hours=1)),
            START,
        )
        clock.advance(timedelta(hours=1, minutes=1))
        assert await runtime.autonomy.fire_due() == 1
        await _wait_for(lambda: _has_activity(runtime))
        rolled = await runtime.store.get_reminder(AGENT.id, reminder.id)
        assert rolled is not None and rolled.next_fire_at == START + timedelta(hours=2)
        clock.advance(timedelta(hours=1))
        assert await runtime.autonomy.fire_due() == 1

        async def twice() -> bool:
            return len(await recent_activity(runtime.store, AGENT.id)) == 2

        await _wait_for(twice)
        assert "Last time it fired (2026-11-30 10:01): said: Time to stretch, Sam!" in mind.respond_inputs[-1]
    finally:
        await runtime.stop()


async def test_the_heartbeat_rests_or_acts_and_stays_deleted_across_restarts(
    tmp_path: Path, mind: Mind
) -> None:
    runtime = await _runtime(tmp_path)
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        beat = await heartbeat_status(runtime.store, AGENT.id)
        assert beat is not None and beat.next_fire_at == START + timedelta(hours=1)
        await create_goal(runtime.store, AGENT.id, "Help Sam finish chapter two", START)
        clock.advance(timedelta(hours=1, seconds=1))
        assert await runtime.autonomy.fire_due() == 1
        await _wait_for(lambda: _has_activity(runtime))
        (rested,) = await recent_activity(runtime.store, AGENT.id)
        assert (
            rested.kind == "heartbeat"
            and rested.outcome == "Ada chose silence: resting: nothing calls for me"
        )
        assert mind.respond_prompts == []  # resting costs one reflection call, nothing more

        mind.intention = "pursue_goal"
        clock.advance(timedelta(hours=1))

        async def idle() -> bool:  # the first beat's workflow has finished, not only its run
            return not await runtime.busy(AGENT.id)

        await _wait_for(idle)
        assert await runtime.autonomy.fire_due() == 1

        async def acted() -> bool:
            return len(await recent_activity(runtime.store, AGENT.id)) == 2

        await _wait_for(acted)
        latest = (await recent_activity(runtime.store, AGENT.id))[0]
        assert latest.outcome == "said: Time to stretch, Sam!"
        prompt = mind.respond_prompts[-1]
        assert "Help Sam finish chapter two" in prompt  # open goals are standing context
        run = await runtime.store.recent_messages(AGENT.id, latest.conversation_id or "", 10)
        assert [m.speaker_name for m in run if m.role is Role.SYSTEM][-1] == "my self-assessment"

        from persyn.runtime.inspect_autonomy import sleep

        assert await sleep(runtime.settings, AGENT)
    finally:
        await runtime.stop()
    # A restart does not resurrect a deleted heartbeat; the agent still answers messages.
    again = await _runtime(tmp_path, clock=ManualClock(START + timedelta(days=1)))
    try:
        assert await heartbeat_status(again.store, AGENT.id) is None
        assert await again.autonomy.fire_due() == 0
        event = Event(
            id=new_id(again.clock.now()),
            agent_id=AGENT.id,
            service="test",
            channel="room",
            speaker=Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam"),
            text="Are you there?",
            received_at=again.clock.now(),
        )
        await again.submit(event)
        assert (await again.wait_marker(AGENT.id, event.id, timeout=30)).transmitted
    finally:
        await again.stop()


async def test_budgets_and_a_busy_agent_skip_runs_and_say_why(tmp_path: Path, mind: Mind) -> None:
    runtime = await _runtime(
        tmp_path, "[autonomy]\ndaily_token_budget = 60\nmax_runs_per_hour = 5\nheartbeat_minutes = 1440\n"
    )
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        for minutes in (1, 2):
            await set_reminder(
                runtime.store,
                AGENT.id,
                f"nudge {minutes}",
                at_trigger(START + timedelta(minutes=minutes), START),
                START,
            )
        clock.advance(timedelta(minutes=1, seconds=30))
        await runtime.autonomy.fire_due()
        await _wait_for(lambda: _has_activity(runtime))
        assert await runtime.autonomy.tokens_used(AGENT.id, clock.now()) == 50
        clock.advance(timedelta(minutes=1))
        await runtime.autonomy.fire_due()  # 50 < 60: runs, and now the day's budget is spent

        async def two() -> bool:
            return len(await recent_activity(runtime.store, AGENT.id)) == 2

        await _wait_for(two)
        reason = await runtime.autonomy.skip_reason(AGENT.id, clock.now(), heartbeat=False)
        assert reason is not None and "autonomy budget of 60 tokens per 24 hours is used (100)" in reason
        # A rolling window: a day later the budget is free again.
        assert (
            await runtime.autonomy.skip_reason(AGENT.id, clock.now() + timedelta(hours=24), heartbeat=False)
            is None
        )

        # Busy: a conversation is in progress when the heartbeat would beat.
        mind.respond_sleep = 1.0
        event = Event(
            id=new_id(clock.now()),
            agent_id=AGENT.id,
            service="test",
            channel="room",
            speaker=Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam"),
            text="Long question",
            received_at=clock.now(),
        )
        await runtime.submit(event)
        await asyncio.sleep(0.3)
        assert await runtime.busy(AGENT.id)
        await runtime.wait_marker(AGENT.id, event.id, timeout=30)

        async def idle() -> bool:
            return not await runtime.busy(AGENT.id)

        await _wait_for(idle)
    finally:
        await runtime.stop()


async def test_the_dbos_schedule_fires_a_due_reminder_on_its_own(tmp_path: Path, mind: Mind) -> None:
    runtime = await _runtime(
        tmp_path, "[autonomy]\ntick_seconds = 1\nheartbeat_minutes = 1440\n", clock=SystemClock()
    )
    try:
        now = datetime.now(UTC)
        await set_reminder(
            runtime.store, AGENT.id, "say hello", at_trigger(now + timedelta(seconds=1), now), now
        )
        await _wait_for(lambda: _has_activity(runtime), timeout=20)
        (entry,) = await recent_activity(runtime.store, AGENT.id)
        assert entry.outcome == "said: Time to stretch, Sam!"
    finally:
        await runtime.stop()


async def test_a_cancelled_reminder_never_fires_and_the_operator_sees_what_ran(
    tmp_path: Path, mind: Mind
) -> None:
    from persyn.runtime.inspect_autonomy import activity, cancel_reminder, reminder

    runtime = await _runtime(tmp_path, "[autonomy]\nheartbeat_minutes = 1440\n")
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        kept = await set_reminder(
            runtime.store,
            AGENT.id,
            "water the plants",
            interval_trigger(600, START + timedelta(minutes=10)),
            START,
        )
        dropped = await set_reminder(
            runtime.store, AGENT.id, "call the bank", at_trigger(START + timedelta(minutes=10), START), START
        )
        cancelled = await cancel_reminder(runtime.settings, AGENT, dropped.id)
        assert cancelled.status.value == "cancelled"
        clock.advance(timedelta(minutes=11))
        assert await runtime.autonomy.fire_due() == 1  # only the one still active
        await _wait_for(lambda: _has_activity(runtime))
        shown, runs = await reminder(runtime.settings, AGENT, kept.id)
        assert shown.fire_count == 1 and [r.outcome for r in runs] == ["said: Time to stretch, Sam!"]
        assert [e.reminder_id for e in await activity(runtime.settings, AGENT, START, 10)] == [kept.id]
        assert await activity(runtime.settings, AGENT, START + timedelta(days=1), 10) == []
        with pytest.raises(Exception, match="no reminder"):
            await reminder(runtime.settings, AGENT, new_id())
    finally:
        await runtime.stop()
