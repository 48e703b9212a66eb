"""The operator's view and switches of what an agent does on its own (`persyn heartbeat`,
`persyn reminders`, `persyn goals`): read and written through the store, no workers needed.
A running daemon picks the change up at its next scheduler tick."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from persyn.core.config import AgentConfig, Settings
from persyn.runtime.autonomy import ActivityEntry, recent_activity
from persyn.runtime.inspect import opened_store
from persyn.schedule import delete_heartbeat, heartbeat_status, restore_heartbeat
from persyn.store.base import Goal, Reminder

__all__ = ["HeartbeatView", "agent_goals", "agent_reminders", "heartbeat", "sleep", "wake"]

_TOKENS_FLAG = "autonomy-tokens:"  # runtime/autonomy.py


@dataclass
class HeartbeatView:
    beat: Reminder | None  # None: asleep
    tokens_today: int
    budget: int
    activity: list[ActivityEntry] = field(default_factory=list[ActivityEntry])


async def heartbeat(settings: Settings, agent: AgentConfig, limit: int = 10) -> HeartbeatView:
    now = datetime.now(UTC)
    async with opened_store(settings) as store:
        beat = await heartbeat_status(store, agent.id)
        raw = await store.get_flag(agent.id, _TOKENS_FLAG + now.strftime("%Y-%m-%d"))
        activity = await recent_activity(store, agent.id, limit=limit)
    tokens = int(raw) if raw and raw.isdigit() else 0
    return HeartbeatView(beat, tokens, settings.autonomy.daily_token_budget, activity)


async def sleep(settings: Settings, agent: AgentConfig) -> bool:
    async with opened_store(settings) as store:
        return await delete_heartbeat(store, agent.id)


async def wake(settings: Settings, agent: AgentConfig) -> Reminder:
    every = int(settings.autonomy.heartbeat_minutes * 60)
    async with opened_store(settings) as store:
        return await restore_heartbeat(store, agent.id, every, datetime.now(UTC))


async def agent_reminders(settings: Settings, agent: AgentConfig, include_cancelled: bool) -> list[Reminder]:
    async with opened_store(settings) as store:
        return await store.list_reminders(agent.id, include_cancelled=include_cancelled)


async def agent_goals(settings: Settings, agent: AgentConfig) -> list[Goal]:
    async with opened_store(settings) as store:
        return await store.list_goals(agent.id)
