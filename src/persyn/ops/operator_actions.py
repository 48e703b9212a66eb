"""The operator's actions from the web console (issue 40): only what the CLI already lets the
operator do (`persyn memory forget`, `persyn reminders cancel`, `persyn heartbeat delete |
restore`), through the same functions, each recorded in the agent's activity log with who did
it — the console grants no authority the terminal does not have (SPEC App. B).

The log entry is written after the action succeeds; a store without an activity log refuses
the action before doing it (an action that cannot be recorded is not taken)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.ops.autonomy import cancel_reminder, sleep, wake
from persyn.ops.history import opened_capability
from persyn.ops.memory import Encoder, memory_ops
from persyn.store.ports.activity import OPERATOR_KIND, ActivityEntry, ActivityPort

__all__ = ["OPERATOR_ACTIONS", "ActionDone", "take_action"]

# action -> whether it names a target (a memory or reminder id)
OPERATOR_ACTIONS: dict[str, bool] = {
    "forget_memory": True,
    "cancel_reminder": True,
    "pause_heartbeat": False,
    "resume_heartbeat": False,
}


@dataclass(frozen=True)
class ActionDone:
    action: str
    target: str | None
    outcome: str  # what happened, as the activity log says it
    logged: ActivityEntry


async def take_action(
    settings: Settings,
    agent: AgentConfig,
    action: str,
    target: str | None,
    *,
    by: str,
    clock: Clock,
    encoder: Encoder | None = None,
) -> ActionDone:
    """Do `action` on `target` for `agent` and log it as done `by` (the key's name).
    InputError (nothing done) for an unknown action, a missing or unknown target."""
    if action not in OPERATOR_ACTIONS:
        raise InputError(f"unknown action {action!r}: one of {', '.join(OPERATOR_ACTIONS)}")
    if OPERATOR_ACTIONS[action] and not target:
        raise InputError(f"action {action!r} needs a target id")
    if not OPERATOR_ACTIONS[action] and target:
        raise InputError(f"action {action!r} takes no target (got {target!r})")
    async with opened_capability(settings, ActivityPort):
        pass  # the log is there before anything is done (InputError naming it if not)
    now = clock.now()
    outcome = await _do(settings, agent, action, target, now, clock, encoder)
    entry = ActivityEntry(
        id=new_id(now),
        agent_id=agent.id,
        at=now,
        kind=OPERATOR_KIND,
        reminder_id=target if action == "cancel_reminder" and target else "",
        objective=f"{action.replace('_', ' ')}{'' if target is None else ' ' + target}",
        outcome=f"{outcome} (by the operator, key {by!r})",
    )
    async with opened_capability(settings, ActivityPort) as log:
        await log.add_activity(entry)
    return ActionDone(action, target, entry.outcome, entry)


async def _do(
    settings: Settings,
    agent: AgentConfig,
    action: str,
    target: str | None,
    now: datetime,
    clock: Clock,
    encoder: Encoder | None,
) -> str:
    if action == "forget_memory" and target:
        async with memory_ops(settings, agent, clock, encoder=encoder) as ops:
            record = await ops.forget(target)
        return f"forgot memory {record.id}: {record.summary[:120]}"
    if action == "cancel_reminder" and target:
        reminder = await cancel_reminder(settings, agent, target, now)
        return f"cancelled reminder {reminder.id}: {reminder.objective[:120]}"
    if action == "pause_heartbeat":
        deleted = await sleep(settings, agent)
        return "paused the heartbeat" if deleted else "the heartbeat was already paused"
    beat = await wake(settings, agent, now)
    return f"resumed the heartbeat (next beat {beat.next_fire_at.isoformat()})"
