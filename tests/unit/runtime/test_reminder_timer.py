"""The reminder timer (`runtime/background/reminder_timer.py`, issue 33 item 15): armed to the
next due reminder, it fires on time without the DBOS schedule (`tick_seconds = 0` here, so only
the timer can fire), learns of reminders another process writes through the store, fires an
overdue one when a process starts, and two timers racing over one store fire a reminder once.

Real runtimes on the wall clock, real stores (SQLite and PostgreSQL); every wait is for a
condition, bounded by the harness's `WAIT_SECONDS`, never a timed assertion."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.clock import SystemClock
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.runtime.background.autonomy import Autonomy, recent_activity
from persyn.runtime.background.reminder_timer import ReminderTimer
from persyn.schedule import at_trigger, set_reminder
from persyn.store import open_store
from persyn.testing import START, Pilot, consolidation_reply, run_runtime
from persyn.testing.models import DoubleReply, registered_double

AGENT = AgentConfig(name="Ada", id=new_id(START), objectives=["help Sam"])
TIMER_ONLY = (
    "[deliberation]\nenabled = false\n"
    "[autonomy]\nschedule = true\ntick_seconds = 0\nwatch_seconds = 1\nheartbeat_minutes = 1440\n"
)


def _reply(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
    if task == "respond":
        return DoubleReply(text="Time to stretch, Sam!")
    if task == "summarize":
        return DoubleReply(output={"summary": "I told Sam to stretch.", "tags": ["health"]})
    return consolidation_reply(task) or DoubleReply(text="ok")


@pytest.fixture(autouse=True)
def said() -> Iterator[None]:
    with registered_double("timer", _reply):
        yield


async def _runs(pilot: Pilot) -> list[str]:
    return [entry.outcome for entry in await recent_activity(pilot.full_store, AGENT.id)]


async def test_a_reminder_another_process_sets_is_armed_and_fires_without_the_schedule(
    tmp_path: Path,
) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:timer", agent=AGENT, config=TIMER_ONLY, clock=SystemClock()
    ) as pilot:
        timer = pilot.runtime.reminder_timer
        assert timer is not None
        # Another process: its own connection to the same store, nothing shared in memory.
        other = open_store(pilot.settings.database_url)
        await other.setup()
        try:
            now = datetime.now(UTC)
            reminder = await set_reminder(
                other, AGENT.id, "remind Sam to stretch", at_trigger(now + timedelta(seconds=3), now), now
            )
        finally:
            await other.close()

        async def armed() -> bool:
            return timer.armed_for == reminder.next_fire_at or bool(await _runs(pilot))

        await pilot.wait_for(armed, "the timer to arm for the other process's reminder")

        async def fired() -> bool:
            return bool(await _runs(pilot))

        await pilot.wait_for(fired, "the timer to fire the reminder")
        await pilot.settle()
        assert await _runs(pilot) == ["said: Time to stretch, Sam!"]
        assert await pilot.full_store.get_reminder(AGENT.id, reminder.id) is None  # one-shot: gone
        assert timer.armed_for is not None and timer.armed_for > reminder.next_fire_at  # the heartbeat's


async def test_a_reminder_that_came_due_while_no_process_ran_fires_at_start(tmp_path: Path) -> None:
    """Nothing of the armed timer survives its process; the next one reads the store."""
    home = tmp_path / "home"
    async with run_runtime(
        home, model="test:timer", agent=AGENT, config=TIMER_ONLY, clock=SystemClock()
    ) as pilot:
        now = datetime.now(UTC)
        reminder = await set_reminder(
            pilot.full_store,
            AGENT.id,
            "remind Sam to stretch",
            at_trigger(now + timedelta(hours=1), now),
            now,
        )
        timer = pilot.runtime.reminder_timer
        assert timer is not None

        async def armed() -> bool:
            return timer.armed_for == reminder.next_fire_at

        await pilot.wait_for(armed, "the timer to arm for the reminder")
        assert await _runs(pilot) == []
    # An hour later (the reminder now overdue), the next process fires it once, at start.
    await _move_reminder(home, reminder.id, datetime.now(UTC) - timedelta(minutes=1))
    async with run_runtime(
        home, model="test:timer", agent=AGENT, config=TIMER_ONLY, clock=SystemClock()
    ) as pilot:

        async def fired() -> bool:
            return bool(await _runs(pilot))

        await pilot.wait_for(fired, "the overdue reminder to fire")
        await pilot.settle()
        assert await _runs(pilot) == ["said: Time to stretch, Sam!"]


async def _move_reminder(home: Path, reminder_id: str, when: datetime) -> None:
    """What the passing hour does to the reminder: it is now due `when`."""
    from persyn.core.config import load_settings

    store = open_store(load_settings(home, environ={}).database_url)
    await store.setup()
    try:
        await store.update_reminder(AGENT.id, reminder_id, when, next_fire_at=when)
    finally:
        await store.close()


async def test_two_timers_on_one_store_fire_a_reminder_once(tmp_path: Path, store_url: str) -> None:
    """Two schedulers (here the runtime's timer and a second one over a connection of its
    own, as another worker has) arm for the same reminder and both fire at its time: the event
    id derived from `reminder_id@fire_time` and `mark_fired`'s compare-and-set let it run once."""
    store = open_store(store_url)
    async with run_runtime(
        tmp_path / "home",
        model="test:timer",
        agent=AGENT,
        config=TIMER_ONLY,
        clock=SystemClock(),
        store=store,
    ) as pilot:
        runtime = pilot.runtime
        other_store = open_store(store_url)
        await other_store.setup()
        other = Autonomy(other_store, SystemClock(), pilot.settings, [AGENT.id], runtime.autonomy.host)
        second = ReminderTimer(other_store, [AGENT.id], SystemClock(), other.fire_due, 1)
        racing = asyncio.ensure_future(second.run())
        try:
            now = datetime.now(UTC)
            reminder = await set_reminder(
                other_store,
                AGENT.id,
                "remind Sam to stretch",
                at_trigger(now + timedelta(seconds=3), now),
                now,
            )
            timer = runtime.reminder_timer
            assert timer is not None

            async def both_armed_then_fired() -> bool:
                gone = await other_store.get_reminder(AGENT.id, reminder.id) is None
                return gone and second.armed_for != reminder.next_fire_at

            await pilot.wait_for(both_armed_then_fired, "the reminder to fire")
            await pilot.settle()
        finally:
            racing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await racing
            await other_store.close()
        assert await _runs(pilot) == ["said: Time to stretch, Sam!"]
