"""The reminder timer (SPEC §4.7): an in-process timer armed to the next due reminder.

A reminder used to be found by a DBOS schedule every 5 s: two workflows and two queue claims a
tick, ~0.4% of a core on an idle deployment (`bench/idle.py`). The timer instead sleeps until
the earliest active reminder of this process's agents is due, then fires what is due
(`Autonomy.fire_due`, the same firing the schedule does: the event id derived from
`reminder_id@fire_time` and `mark_fired`'s compare-and-set keep it exactly-once however many
processes fire it).

How it learns that the schedule changed: every `[autonomy] watch_seconds` it re-reads the
earliest due time from the store (one indexed query per agent, no DBOS work), so a reminder
set, edited or cancelled by anyone — the agent's tools here, another worker, `persyn tools
call` or `persyn heartbeat restore` from the CLI, a worker on another host — is armed within
that interval (the agent sets reminders minutes ahead at least: one set here needs no faster
path). A due time it fires early for is harmless: `fire_due` finds nothing and the timer re-arms.

What it keeps: nothing in memory that the store does not hold. Killed while armed, the next
process reads the same earliest due time and fires an overdue reminder at once. The slow DBOS
schedule (`[autonomy] tick_seconds`, 60 s) stays as the safety net for a timer that missed
(its task died, the store was away when it looked).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime, timedelta

from persyn.core.clock import Clock
from persyn.store.ports.schedule import SchedulePort

__all__ = ["ReminderTimer"]

log = logging.getLogger(__name__)

_HORIZON = timedelta(days=3650)  # "any time": the earliest active reminder, however far off
_LATE = 0.005  # seconds past the due time the timer wakes, so the clock reads it as due


class ReminderTimer:
    """Sleeps until the next due reminder of `agent_ids` (re-read every `watch_seconds`), then
    calls `fire` (`Autonomy.fire_due`)."""

    def __init__(
        self,
        schedule: SchedulePort,
        agent_ids: Collection[str],
        clock: Clock,
        fire: Callable[[], Awaitable[int]],
        watch_seconds: float,
    ) -> None:
        self._schedule = schedule
        self._agent_ids = tuple(agent_ids)
        self._clock = clock
        self._fire = fire
        self._watch = watch_seconds
        self.armed_for: datetime | None = None  # the due time it sleeps until, if one is near

    async def next_due(self) -> datetime | None:
        """The earliest time a reminder of one of this process's agents is due, if any."""
        horizon = self._clock.now() + _HORIZON
        earliest: datetime | None = None
        for agent_id in self._agent_ids:
            for reminder in await self._schedule.due_reminders(horizon, agent_id=agent_id, limit=1):
                if earliest is None or reminder.next_fire_at < earliest:
                    earliest = reminder.next_fire_at
        return earliest

    async def run(self) -> None:
        # A due time fired for that is still due afterwards (its `mark_fired` failed: the
        # store refused the write) is fired again only after a watch interval, not in a loop.
        fired_for: datetime | None = None
        failing = False
        while True:
            wait = self._watch
            try:
                due = await self.next_due()
                now = self._clock.now()
                if due is not None and due <= now and due != fired_for:
                    self.armed_for = due
                    await self._fire()
                    fired_for = due
                    continue
                fired_for = None
                if due != self.armed_for and due is not None:
                    log.info("reminder timer armed for %s", due.isoformat())  # one line per change
                self.armed_for = due
                if due is not None and due > now:
                    wait = min(wait, (due - now).total_seconds() + _LATE)
                if failing:
                    log.info("the reminder timer reads the store again")
                    failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store away: the next watch looks again
                if not failing:  # one line per condition, not one per watch
                    log.warning("the reminder timer could not read or fire reminders: %s", exc)
                    failing = True
            await asyncio.sleep(wait)
