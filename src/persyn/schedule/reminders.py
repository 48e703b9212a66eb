"""Reminders and goals as the agent and the scheduler use them (SPEC §4.7, §4.8): the
store's schedule methods plus the trigger math of `triggers.py`, so a caller never computes
a fire time by hand.

The scheduler's cycle, at `now`:

    for reminder in await store.due_reminders(now):
        fire_time = reminder.next_fire_at
        enqueue an event with dedup id fire_key(reminder.id, fire_time)   # exactly once
        await mark_fired(store, reminder, fire_time, now)                  # roll forward / delete

Several schedulers may run that cycle at once: the dedup id makes the activation happen
once, and `mark_fired` changes the row only for the first of them (the rest get STALE).
"""

from __future__ import annotations

from datetime import datetime

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.schedule.triggers import first_fire_at, is_recurring, next_fire_after, utc
from persyn.store.base import (
    GLOBAL,
    AtTrigger,
    FireResult,
    Goal,
    GoalStatus,
    Provenance,
    Reminder,
    ReminderAction,
    Trigger,
)
from persyn.store.ports.schedule import SchedulePort

__all__ = [
    "HEARTBEAT_KIND",
    "REMINDER_KIND",
    "close_goal",
    "create_goal",
    "drop_recurrence",
    "edit_reminder",
    "fire_key",
    "mark_fired",
    "open_goals",
    "reschedule_reminder",
    "set_reminder",
]

REMINDER_KIND = "reminder"
HEARTBEAT_KIND = "heartbeat"  # the core recurring beat: never shown to the agent's tools


def fire_key(reminder_id: str, fire_time: datetime) -> str:
    """The dedup id of one firing, `reminder_id@fire_time` (ARCHITECTURE §3): the same for
    every scheduler that sees the reminder due at that time."""
    return f"{reminder_id}@{utc(fire_time).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


async def set_reminder(
    store: SchedulePort,
    agent_id: str,
    objective: str,
    trigger: Trigger,
    now: datetime,
    *,
    action: ReminderAction | None = None,
    kind: str = REMINDER_KIND,
    provenance: Provenance = GLOBAL,
) -> Reminder:
    """Store a new reminder, first due when its trigger says (`first_fire_at`), with where
    it was set (`provenance`: who may see it listed; its run carries it)."""
    reminder = Reminder(
        id=new_id(now),
        agent_id=agent_id,
        kind=kind,
        objective=objective,
        trigger=trigger,
        action=action or ReminderAction(),
        next_fire_at=first_fire_at(trigger, now),
        created_at=now,
        updated_at=now,
        provenance=provenance,
    )
    await store.add_reminder(reminder)
    stored = await store.get_reminder(agent_id, reminder.id)
    assert stored is not None  # just written on the single writer
    return stored


async def edit_reminder(
    store: SchedulePort,
    agent_id: str,
    reminder_id: str,
    now: datetime,
    *,
    objective: str | None = None,
    trigger: Trigger | None = None,
    action: ReminderAction | None = None,
) -> Reminder:
    """Change a reminder's objective, trigger (its next fire time follows) or action."""
    next_fire_at = None if trigger is None else first_fire_at(trigger, now)
    return await store.update_reminder(
        agent_id,
        reminder_id,
        now,
        objective=objective,
        trigger=trigger,
        next_fire_at=next_fire_at,
        action=action,
    )


async def reschedule_reminder(
    store: SchedulePort, agent_id: str, reminder_id: str, at: datetime, now: datetime
) -> Reminder:
    """Move the next firing to `at`. A one-shot reminder becomes one at `at`; a recurring
    one fires at `at` and then carries on from its trigger."""
    when = utc(at)
    if when <= utc(now):
        raise InputError(f"the time {when.isoformat()!r} has already passed; choose a time in the future")
    current = await _existing(store, agent_id, reminder_id)
    if is_recurring(current.trigger):
        return await store.update_reminder(agent_id, reminder_id, now, next_fire_at=when)
    return await store.update_reminder(
        agent_id, reminder_id, now, trigger=AtTrigger(at=when), next_fire_at=when
    )


async def drop_recurrence(store: SchedulePort, agent_id: str, reminder_id: str, now: datetime) -> Reminder:
    """Make a recurring reminder one-shot: it fires once more, at its next time, and is gone."""
    current = await _existing(store, agent_id, reminder_id)
    if not is_recurring(current.trigger):
        return current
    when = current.next_fire_at
    return await store.update_reminder(
        agent_id, reminder_id, now, trigger=AtTrigger(at=when), next_fire_at=when
    )


async def mark_fired(
    store: SchedulePort, reminder: Reminder, fire_time: datetime, now: datetime
) -> FireResult:
    """Record a firing: a recurring reminder rolls forward past both `fire_time` and `now`
    (skipping fires missed while nothing ran), a one-shot one is deleted. Atomic; STALE when
    another scheduler got there first or the reminder changed meanwhile."""
    return await store.mark_fired(
        reminder.agent_id,
        reminder.id,
        fire_time,
        lambda stored: next_fire_after(stored.trigger, fire_time, now),
    )


async def create_goal(
    store: SchedulePort, agent_id: str, description: str, now: datetime, *, provenance: Provenance = GLOBAL
) -> Goal:
    """A new open goal, with where it formed (`provenance`: where it is standing context)."""
    goal = Goal(
        id=new_id(now),
        agent_id=agent_id,
        description=description,
        created_at=now,
        updated_at=now,
        provenance=provenance,
    )
    await store.add_goal(goal)
    stored = await store.get_goal(agent_id, goal.id)
    assert stored is not None
    return stored


async def close_goal(
    store: SchedulePort, agent_id: str, goal_id: str, status: GoalStatus, outcome: str, now: datetime
) -> Goal:
    """Mark a goal achieved, abandoned or retired, saying how it ended."""
    if status is GoalStatus.OPEN:
        raise InputError("closing a goal needs a status other than 'open'")
    return await store.update_goal(agent_id, goal_id, now, status=status, outcome=outcome)


async def open_goals(store: SchedulePort, agent_id: str, limit: int = 20) -> list[Goal]:
    """The standing context source of SPEC §4.8: open goals, oldest first."""
    return await store.list_goals(agent_id, statuses=[GoalStatus.OPEN], limit=limit)


async def _existing(store: SchedulePort, agent_id: str, reminder_id: str) -> Reminder:
    reminder = await store.get_reminder(agent_id, reminder_id)
    if reminder is None:
        raise InputError(f"there is no reminder {reminder_id!r}")
    return reminder
