"""Reminders, the heartbeat and their budgets through the real runtime (DBOS, SQLite, gateway,
meter) with a model double that plays the respond, reflect and consolidation stages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.core.clock import Clock, ManualClock, SystemClock
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.gateway.base import TokenUsage
from persyn.runtime.background.autonomy import (
    ACTIVITY_RETENTION,
    ActivityEntry,
    recent_activity,
    window_tokens,
)
from persyn.schedule import at_trigger, create_goal, heartbeat_status, interval_trigger, set_reminder
from persyn.store.base import Role
from persyn.testing import START, Pilot, consolidation_reply, run_runtime
from persyn.testing.models import DoubleReply, last_user_text, registered_double

AGENT = AgentConfig(name="Ada", id=new_id(START), objectives=["help Sam finish the thesis"])


class Mind:
    def __init__(self) -> None:
        self.intention = "rest"
        self.respond_prompts: list[str] = []
        self.respond_inputs: list[str] = []
        self.hold: asyncio.Event | None = None  # respond waits for it, when set

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
            if self.hold is not None:
                await self.hold.wait()
            self.respond_prompts.append(info.instructions or "")
            self.respond_inputs.append(said)
            return DoubleReply(
                text="Time to stretch, Sam!", usage=TokenUsage(input_tokens=40, output_tokens=10)
            )
        if task == "summarize":
            return DoubleReply(
                output={"summary": "My reminder fired and I told Sam to stretch.", "tags": ["health"]}
            )
        return consolidation_reply(task) or DoubleReply(text="ok")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("autonomous", instance):
        yield instance


def _runtime(
    tmp_path: Path, extra: str = "", clock: Clock | None = None
) -> AbstractAsyncContextManager[Pilot]:
    """The heartbeat and reminders fire by hand (`pilot.fire`) on a moved clock, unless `extra`
    turns the DBOS schedule on."""
    return run_runtime(
        tmp_path / "home",
        model="test:autonomous",
        agent=AGENT,
        config="[deliberation]\nenabled = false\n" + extra,
        clock=clock,
    )


async def _activity(pilot: Pilot) -> int:
    return len(await recent_activity(pilot.full_store, AGENT.id))


async def test_a_due_reminder_fires_once_through_the_pipeline_and_is_remembered(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        runtime, store = pilot.runtime, pilot.full_store
        reminder = await set_reminder(
            store, AGENT.id, "remind Sam to stretch", at_trigger(START + timedelta(minutes=5), START), START
        )
        assert await runtime.autonomy.fire_due() == 0  # not due yet
        pilot.advance(timedelta(minutes=6))
        # Two schedulers see it due at once: the reminder fires once.
        fired = await asyncio.gather(runtime.autonomy.fire_due(), runtime.autonomy.fire_due())
        assert sum(fired) >= 1
        await pilot.settle()
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
        (memory,) = [r for r in await store.list_records(AGENT.id) if r.kind == "reminder"]
        assert f"reminder-{reminder.id}" in memory.tags and memory.channel == "self:reminders"
        assert await runtime.autonomy.fire_due() == 0


async def test_a_recurring_reminder_rolls_forward_and_sees_what_happened_last_time(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path, "[autonomy]\nheartbeat_minutes = 1440\n") as pilot:  # no beat in the way
        reminder = await set_reminder(
            pilot.full_store,
            AGENT.id,
            "check on the thesis",
            interval_trigger(3600, START + timedelta(hours=1)),
            START,
        )
        assert await pilot.fire(timedelta(hours=1, minutes=1)) == 1
        assert await _activity(pilot) == 1
        rolled = await pilot.full_store.get_reminder(AGENT.id, reminder.id)
        assert rolled is not None and rolled.next_fire_at == START + timedelta(hours=2)
        assert await pilot.fire(timedelta(hours=1)) == 1
        assert await _activity(pilot) == 2
        assert "Last time it fired (2026-11-30 10:01): said: Time to stretch, Sam!" in mind.respond_inputs[-1]


async def test_the_heartbeat_rests_or_acts_and_stays_deleted_across_restarts(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        beat = await heartbeat_status(pilot.full_store, AGENT.id)
        assert beat is not None and beat.next_fire_at == START + timedelta(hours=1)
        await create_goal(pilot.full_store, AGENT.id, "Help Sam finish chapter two", START)
        assert await pilot.fire(timedelta(hours=1, seconds=1)) == 1
        (rested,) = await recent_activity(pilot.full_store, AGENT.id)
        assert (
            rested.kind == "heartbeat"
            and rested.outcome == "Ada chose silence: resting: nothing calls for me"
        )
        assert mind.respond_prompts == []  # resting costs one reflection call, nothing more
        assert "heartbeat" in {r.trigger for r in pilot.usage()}
        assert "message" not in {r.trigger for r in pilot.usage()}

        mind.intention = "pursue_goal"
        assert await pilot.fire(timedelta(hours=1)) == 1  # once the first beat's workflow has finished
        assert await _activity(pilot) == 2
        latest = (await recent_activity(pilot.full_store, AGENT.id))[0]
        assert latest.outcome == "said: Time to stretch, Sam!"
        prompt = mind.respond_prompts[-1]
        assert "Help Sam finish chapter two" in prompt  # open goals are standing context
        run = await pilot.store.recent_messages(AGENT.id, latest.conversation_id or "", 10)
        assert [m.speaker_name for m in run if m.role is Role.SYSTEM][-1] == "my self-assessment"

        from persyn.ops.autonomy import sleep

        assert await sleep(pilot.settings, AGENT)
    # A restart does not resurrect a deleted heartbeat; the agent still answers messages.
    async with _runtime(tmp_path, clock=ManualClock(START + timedelta(days=1))) as again:
        assert await heartbeat_status(again.full_store, AGENT.id) is None
        assert await again.runtime.autonomy.fire_due() == 0
        await again.say("Are you there?", transmitted=True)


async def test_budgets_and_a_busy_agent_skip_runs_and_say_why(tmp_path: Path, mind: Mind) -> None:
    extra = "[autonomy]\ndaily_token_budget = 60\nmax_runs_per_hour = 5\nheartbeat_minutes = 1440\n"
    async with _runtime(tmp_path, extra) as pilot:
        runtime = pilot.runtime
        for minutes in (1, 2):
            await set_reminder(
                pilot.full_store,
                AGENT.id,
                f"nudge {minutes}",
                at_trigger(START + timedelta(minutes=minutes), START),
                START,
            )
        await pilot.fire(timedelta(minutes=1, seconds=30))
        assert await _activity(pilot) == 1
        assert await runtime.autonomy.tokens_used(AGENT.id, pilot.clock.now()) == 50
        await pilot.fire(timedelta(minutes=1))  # 50 < 60: runs, and now the day's budget is spent
        assert await _activity(pilot) == 2
        now = pilot.clock.now()
        reason = await runtime.autonomy.skip_reason(AGENT.id, now, heartbeat=False)
        assert reason is not None and "autonomy budget of 60 tokens per 24 hours is used (100)" in reason
        # A rolling window: a day later the budget is free again.
        assert (
            await runtime.autonomy.skip_reason(AGENT.id, now + timedelta(hours=24), heartbeat=False) is None
        )

        # Busy: a conversation is in progress when the heartbeat would beat.
        mind.hold = asyncio.Event()
        event = pilot.event("Long question")
        await runtime.submit(event)
        assert await runtime.intake.busy(AGENT.id)
        mind.hold.set()
        await runtime.wait_marker(AGENT.id, event.id, timeout=120)
        await pilot.idle()


async def test_the_dbos_schedule_fires_a_due_reminder_on_its_own(tmp_path: Path, mind: Mind) -> None:
    # The safety tick alone (no timer): what catches a reminder the timer missed.
    extra = "[autonomy]\nschedule = true\ntick_seconds = 1\nwatch_seconds = 0\nheartbeat_minutes = 1440\n"
    async with _runtime(tmp_path, extra, clock=SystemClock()) as pilot:
        now = datetime.now(UTC)
        await set_reminder(
            pilot.full_store, AGENT.id, "say hello", at_trigger(now + timedelta(seconds=1), now), now
        )

        async def fired() -> bool:
            return await _activity(pilot) > 0

        await pilot.wait_for(fired, "the schedule to fire the reminder")
        (entry,) = await recent_activity(pilot.full_store, AGENT.id)
        assert entry.outcome == "said: Time to stretch, Sam!"


async def test_a_cancelled_reminder_never_fires_and_the_operator_sees_what_ran(
    tmp_path: Path, mind: Mind
) -> None:
    from persyn.ops.autonomy import activity, cancel_reminder, reminder

    async with _runtime(tmp_path, "[autonomy]\nheartbeat_minutes = 1440\n") as pilot:
        kept = await set_reminder(
            pilot.full_store,
            AGENT.id,
            "water the plants",
            interval_trigger(600, START + timedelta(minutes=10)),
            START,
        )
        dropped = await set_reminder(
            pilot.full_store,
            AGENT.id,
            "call the bank",
            at_trigger(START + timedelta(minutes=10), START),
            START,
        )
        cancelled = await cancel_reminder(pilot.settings, AGENT, dropped.id, START)
        assert cancelled.status.value == "cancelled"
        assert await pilot.fire(timedelta(minutes=11)) == 1  # only the one still active
        shown, runs = await reminder(pilot.settings, AGENT, kept.id)
        assert shown.fire_count == 1 and [r.outcome for r in runs] == ["said: Time to stretch, Sam!"]
        assert [e.reminder_id for e in await activity(pilot.settings, AGENT, START, 10)] == [kept.id]
        assert await activity(pilot.settings, AGENT, START + timedelta(days=1), 10) == []
        with pytest.raises(Exception, match="no reminder"):
            await reminder(pilot.settings, AGENT, new_id())


async def test_the_budget_window_counts_the_newest_runs_however_long_the_log(tmp_path: Path) -> None:
    """600 runs, one every 30 minutes (12.5 days): the rolling 24-hour window holds the newest
    48 of them, 100 tokens each. The flag-backed log read the 500 oldest keys and counted 0,
    so the budget and the hourly cap stopped being enforced after about 10 days."""
    async with _runtime(tmp_path, "[autonomy]\nmax_runs_per_hour = 2\n") as pilot:
        runtime, now = pilot.runtime, START
        for k in reversed(range(600)):
            at = now - timedelta(minutes=30 * k)
            await runtime.autonomy.record(
                ActivityEntry(
                    id=new_id(at),
                    agent_id=AGENT.id,
                    at=at,
                    kind="heartbeat",
                    reminder_id=new_id(START),
                    objective="beat",
                    outcome="rested",
                    tokens=100,
                )
            )
        assert await window_tokens(pilot.full_store, AGENT.id, now) == 4_800
        newest = await recent_activity(pilot.full_store, AGENT.id, limit=3)
        assert [e.at for e in newest] == [now - timedelta(minutes=30 * k) for k in range(3)]
        # Two runs in the last hour (now, and 30 minutes ago): the hourly cap of 2 is reached.
        reason = await runtime.autonomy.skip_reason(AGENT.id, now, heartbeat=False)
        assert reason == "2 self-initiated runs in the last hour (limit 2)"


async def test_runs_older_than_the_retention_are_purged_when_a_run_is_logged(tmp_path: Path) -> None:
    async with _runtime(tmp_path) as pilot:
        old, recent = START - ACTIVITY_RETENTION - timedelta(days=1), START - timedelta(days=30)
        for at in (old, recent, START):
            entry = ActivityEntry(
                id=new_id(at), agent_id=AGENT.id, at=at, kind="heartbeat", reminder_id="",
                objective="beat", outcome="rested",
            )  # fmt: skip
            await pilot.runtime.autonomy.record(entry)
        assert [e.at for e in await recent_activity(pilot.full_store, AGENT.id)] == [START, recent]
