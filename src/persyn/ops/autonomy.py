"""The operator's view and switches of what an agent does on its own (`persyn heartbeat`,
`persyn reminders`, `persyn goals`): read and written through the store, no workers needed.
A running daemon picks the change up at its next scheduler tick."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import parse_id
from persyn.ops.history import opened_capability
from persyn.runtime.background.autonomy import ActivityEntry, recent_activity, window_tokens
from persyn.schedule import delete_heartbeat, heartbeat_status, restore_heartbeat
from persyn.store.base import Goal, Reminder
from persyn.store.capabilities import ScheduleStore, capability
from persyn.store.ports.activity import ActivityPort

__all__ = [
    "HeartbeatView",
    "activity",
    "agent_goals",
    "agent_reminders",
    "cancel_reminder",
    "heartbeat",
    "reminder",
    "sleep",
    "wake",
]


@dataclass
class HeartbeatView:
    beat: Reminder | None  # None: asleep
    tokens_today: int
    budget: int
    activity: list[ActivityEntry] = field(default_factory=list[ActivityEntry])


async def heartbeat(settings: Settings, agent: AgentConfig, now: datetime, limit: int = 10) -> HeartbeatView:
    """The heartbeat, the autonomy budget spent in the 24 hours up to `now` (the command's
    clock, moved with `persyn --now` like the runs it counts), and the latest runs."""
    async with opened_capability(settings, ScheduleStore) as store:
        beat = await heartbeat_status(store, agent.id)
        log = capability(store, ActivityPort)
        tokens = await window_tokens(log, agent.id, now)
        activity = await recent_activity(log, agent.id, limit=limit)
    return HeartbeatView(beat, tokens, settings.autonomy.daily_token_budget, activity)


async def sleep(settings: Settings, agent: AgentConfig) -> bool:
    async with opened_capability(settings, ScheduleStore) as store:
        return await delete_heartbeat(store, agent.id)


async def wake(settings: Settings, agent: AgentConfig, now: datetime) -> Reminder:
    every = int(settings.autonomy.heartbeat_minutes * 60)
    async with opened_capability(settings, ScheduleStore) as store:
        return await restore_heartbeat(store, agent.id, every, now)


async def agent_reminders(settings: Settings, agent: AgentConfig, include_cancelled: bool) -> list[Reminder]:
    async with opened_capability(settings, ScheduleStore) as store:
        return await store.list_reminders(agent.id, include_cancelled=include_cancelled)


async def agent_goals(settings: Settings, agent: AgentConfig) -> list[Goal]:
    async with opened_capability(settings, ScheduleStore) as store:
        return await store.list_goals(agent.id)


async def reminder(
    settings: Settings, agent: AgentConfig, reminder_id: str
) -> tuple[Reminder, list[ActivityEntry]]:
    """One of the agent's reminders and what happened the last times it fired."""
    wanted = parse_id(reminder_id, what="reminder id")
    async with opened_capability(settings, ScheduleStore) as store:
        found = await _reminder(store, agent, wanted)
        log = capability(store, ActivityPort)  # the reminder without its runs, if no log
        runs = [] if log is None else await log.recent_activity(agent.id, limit=10, reminder_id=wanted)
    return found, runs


async def _reminder(store: ScheduleStore, agent: AgentConfig, wanted: str) -> Reminder:
    found = await store.get_reminder(agent.id, wanted)
    if found is None or found.kind != "reminder":
        raise InputError(f"agent {agent.name} has no reminder {wanted!r} (see `persyn reminders list`)")
    return found


async def cancel_reminder(
    settings: Settings, agent: AgentConfig, reminder_id: str, now: datetime
) -> Reminder:
    wanted = parse_id(reminder_id, what="reminder id")
    async with opened_capability(settings, ScheduleStore) as store:
        found = await _reminder(store, agent, wanted)
        return await store.cancel_reminder(agent.id, found.id, now)


async def activity(
    settings: Settings, agent: AgentConfig, since: datetime | None, limit: int
) -> list[ActivityEntry]:
    async with opened_capability(settings, ActivityPort) as store:
        return await store.recent_activity(agent.id, limit=limit, since=since)
