"""The heartbeat's row in the schedule (SPEC §4.7): bootstrapped exactly once per agent,
deleted durably, restored only on request.

The heartbeat is a recurring reminder of kind `HEARTBEAT_KIND`, fired by the same scheduler
as every reminder but hidden from the agent's own tools. Its id is derived from the agent's
id, so every process computes the same one, and a durable flag records that it was
bootstrapped:

- `bootstrap_heartbeat` (at every start) creates it only if the flag is absent — so a
  heartbeat the operator deleted stays deleted across restarts. It writes the row first and
  the flag second: a crash in between leaves a row and no flag, and the next start just sets
  the flag. Racing starters write the same id: one insert wins, the others find it there.
  An existing heartbeat whose interval differs from the configured one is re-timed.
- `delete_heartbeat` removes the row (the flag stays): the agent sleeps until a message.
- `restore_heartbeat` recreates the row, next beat one interval from now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from persyn.core.errors import StoreError
from persyn.core.ids import derived_id, id_time
from persyn.schedule.reminders import HEARTBEAT_KIND
from persyn.schedule.triggers import interval_trigger
from persyn.store.base import IntervalTrigger, Reminder
from persyn.store.capabilities import ScheduleStore

__all__ = [
    "BOOTSTRAP_FLAG",
    "HEARTBEAT_OBJECTIVE",
    "bootstrap_heartbeat",
    "delete_heartbeat",
    "heartbeat_id",
    "heartbeat_status",
    "restore_heartbeat",
]

BOOTSTRAP_FLAG = "heartbeat:bootstrapped"
HEARTBEAT_OBJECTIVE = (
    "Heartbeat: review your recent memories and open goals, assess what patterns you see and "
    "whether they serve your objectives, then act on it — or rest, saying why."
)


def heartbeat_id(agent_id: str) -> str:
    """The same id in every process: a ULID at the agent id's time, hashed from it."""
    return derived_id(id_time(agent_id), agent_id, HEARTBEAT_KIND)


async def heartbeat_status(store: ScheduleStore, agent_id: str) -> Reminder | None:
    """The heartbeat, or None when it was deleted (or never bootstrapped)."""
    return await store.get_reminder(agent_id, heartbeat_id(agent_id))


async def bootstrap_heartbeat(
    store: ScheduleStore, agent_id: str, every_seconds: int, now: datetime
) -> Reminder | None:
    """Create the heartbeat if this agent never had one; keep it deleted if it was deleted.
    Returns the heartbeat as it now is (None: asleep)."""
    if await store.get_flag(agent_id, BOOTSTRAP_FLAG) is not None:
        current = await heartbeat_status(store, agent_id)
        stale = (
            current is not None
            and isinstance(current.trigger, IntervalTrigger)
            and current.trigger.every_seconds != every_seconds
        )
        return await _retime(store, current, every_seconds, now) if stale and current else current
    current = await heartbeat_status(store, agent_id) or await _create(store, agent_id, every_seconds, now)
    await store.set_flag_if_absent(agent_id, BOOTSTRAP_FLAG, now.isoformat())
    return current


async def delete_heartbeat(store: ScheduleStore, agent_id: str) -> bool:
    """Put the agent to sleep, durably. False if it was already asleep."""
    return await store.delete_reminder(agent_id, heartbeat_id(agent_id))


async def restore_heartbeat(
    store: ScheduleStore, agent_id: str, every_seconds: int, now: datetime
) -> Reminder:
    """Wake the agent's idle cognition: the heartbeat again, next beat one interval from now
    (an existing one is left as it is)."""
    current = await heartbeat_status(store, agent_id) or await _create(store, agent_id, every_seconds, now)
    await store.set_flag_if_absent(agent_id, BOOTSTRAP_FLAG, now.isoformat())
    return current


async def _create(store: ScheduleStore, agent_id: str, every_seconds: int, now: datetime) -> Reminder:
    trigger = interval_trigger(every_seconds, now + timedelta(seconds=every_seconds))
    reminder = Reminder(
        id=heartbeat_id(agent_id),
        agent_id=agent_id,
        kind=HEARTBEAT_KIND,
        objective=HEARTBEAT_OBJECTIVE,
        trigger=trigger,
        next_fire_at=trigger.start,
        created_at=now,
        updated_at=now,
    )
    try:
        await store.add_reminder(reminder)
    except StoreError:
        existing = await heartbeat_status(store, agent_id)  # a racing process created it
        if existing is None:
            raise
        return existing
    return reminder


async def _retime(store: ScheduleStore, current: Reminder, every_seconds: int, now: datetime) -> Reminder:
    trigger = interval_trigger(every_seconds, now + timedelta(seconds=every_seconds))
    return await store.update_reminder(
        current.agent_id, current.id, now, trigger=trigger, next_fire_at=trigger.start
    )
