"""What the agent does without being spoken to (SPEC §4.7, §4.8): reminders fire, the heartbeat
beats — each as an event through the agent's own queue and the full pipeline — under budgets.

The scheduler (a DBOS schedule every `[autonomy] tick_seconds`, `fire_due`) turns each due
reminder into an `Event` whose id is derived from `reminder_id@fire_time`, so however many
schedulers see it due, the activation runs once (the event id is the queue's dedup key),
then rolls the reminder forward or deletes it (`schedule.mark_fired`, compare-and-set).
Heartbeat events go through the same per-agent queue as messages, so a beat never overlaps
another beat or a conversation; a beat that finds the agent busy is skipped.

Self-initiated runs are bounded before they start (`skip_reason`): a token budget over a
rolling 24-hour window and a runs-per-hour cap per agent, counted from what earlier runs
actually used (the meter's records for the run's thread, kept with each run's activity entry). Skips,
rests and outcomes land in the activity log (flags `activity:<run id>`), which `persyn
heartbeat status` shows and the agent's introspection tool reads.

Provenance (ARCHITECTURE §4, turn 2): a run writes — goals, facts, reminders, its activity
entry — with the provenance of what it read, kept under `run-provenance:<event id>` for the
run's steps. A reminder's run starts from the reminder's own (and its earlier runs'); a
heartbeat's is set by its assessment (`cognition.reflection.review_material`); each tool
that shows the run something narrows it (`narrow_run`, `memory.access.derived_provenance`:
only ever narrower, so a replayed step changes nothing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from persyn.cognition.pipeline import TurnSetup
from persyn.core.events import Event, EventKind
from persyn.core.ids import derived_id
from persyn.core.records import Sensitivity, channel_key
from persyn.memory.access import Provenanced, derived_provenance
from persyn.schedule import HEARTBEAT_KIND, fire_key, mark_fired
from persyn.store.base import Conversation, Provenance, Reminder, Store
from persyn.tools.activity import UNATTRIBUTED_RUN
from persyn.usage.records import UsageRecord

if TYPE_CHECKING:
    from persyn.runtime.app import Runtime

__all__ = [
    "ACTIVITY_FLAG",
    "AUTONOMOUS_SERVICE",
    "RUN_FLAG",
    "RUN_PROVENANCE_FLAG",
    "ActivityEntry",
    "Autonomy",
    "RunTokens",
    "narrow_run",
    "recent_activity",
    "run_kind",
    "run_provenance",
    "run_sensitivity",
    "set_run_provenance",
    "window_tokens",
]

log = logging.getLogger(__name__)

AUTONOMOUS_SERVICE = "self"  # the surface of self-initiated runs with no one to address
ACTIVITY_FLAG = "activity:"
RUN_FLAG = "run:"  # + conversation id: what caused a self-initiated conversation
RUN_PROVENANCE_FLAG = "run-provenance:"  # + event id: the provenance of what the run writes
_WINDOW = timedelta(hours=24)
_ACTIVITY_SCAN = 500


class ActivityEntry(BaseModel):
    """One self-initiated run (or a skip): what the agent did on its own, and what it cost."""

    id: str  # the run's event id (skips: derived from the fire key too)
    agent_id: str
    at: datetime
    kind: str  # "heartbeat" | "reminder"
    reminder_id: str
    objective: str
    outcome: str
    tokens: int = 0
    conversation_id: str | None = None
    # Where what the run read may surface; `recent_activity` (the tool) shows it only there.
    provenance: Provenance = UNATTRIBUTED_RUN


def _unknown_run(home: str) -> Provenance:
    """A run whose provenance was never recorded: its own channel, with nobody present."""
    return Provenance(channel=home, sensitivity=Sensitivity.PRIVATE)


async def run_provenance(store: Store, agent_id: str, event_id: str, home: str) -> Provenance:
    """The provenance of what run `event_id` writes (`home`: the run's channel)."""
    raw = await store.get_flag(agent_id, RUN_PROVENANCE_FLAG + event_id)
    if raw is None:
        return _unknown_run(home)
    try:
        return Provenance.model_validate_json(raw)
    except ValueError:
        return _unknown_run(home)


async def set_run_provenance(store: Store, agent_id: str, event_id: str, provenance: Provenance) -> None:
    await store.set_flag(agent_id, RUN_PROVENANCE_FLAG + event_id, provenance.model_dump_json())


async def narrow_run(
    store: Store, agent_id: str, event_id: str, home: str, items: Sequence[Provenanced]
) -> None:
    """The run read `items`: from now on it writes at most where they may surface too."""
    if not items:
        return

    def narrow(raw: str | None) -> str:
        try:
            current = _unknown_run(home) if raw is None else Provenance.model_validate_json(raw)
        except ValueError:
            current = _unknown_run(home)
        return derived_provenance([current, *items], home).model_dump_json()

    await store.update_flag(agent_id, RUN_PROVENANCE_FLAG + event_id, narrow)


async def recent_activity(
    store: Store, agent_id: str, limit: int = 20, kind: str | None = None
) -> list[ActivityEntry]:
    """The newest first."""
    raw = await store.flags_with_prefix(agent_id, ACTIVITY_FLAG, limit=_ACTIVITY_SCAN)
    entries: list[ActivityEntry] = []
    for value in raw.values():
        try:
            entry = ActivityEntry.model_validate_json(value)
        except ValueError:
            continue
        if kind is None or entry.kind == kind:
            entries.append(entry)
    entries.sort(key=lambda e: (e.at, e.id), reverse=True)
    return entries[:limit]


async def window_tokens(store: Store, agent_id: str, now: datetime) -> int:
    """Tokens the agent's self-initiated runs used in the last 24 hours (rolling window)."""
    entries = await recent_activity(store, agent_id, limit=_ACTIVITY_SCAN)
    return sum(e.tokens for e in entries if now - _WINDOW < e.at <= now)


class RunTokens:
    """A meter adapter that adds up the tokens of the self-initiated runs in flight, by
    thread (the activation's workflow id = the run's event id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[str, int] = {}

    def watch(self, thread_id: str) -> None:
        with self._lock:
            self._watched.setdefault(thread_id, 0)

    def pop(self, thread_id: str) -> int:
        with self._lock:
            return self._watched.pop(thread_id, 0)

    def handle(self, record: UsageRecord) -> None:
        if record.thread_id is None:
            return
        with self._lock:
            if record.thread_id in self._watched:
                self._watched[record.thread_id] += record.input_tokens + record.output_tokens

    def close(self) -> None:
        return None


@dataclass
class Autonomy:
    runtime: Runtime
    tokens: RunTokens

    @property
    def store(self) -> Store:
        return self.runtime.store

    # firing ----------------------------------------------------------------------------
    async def fire_due(self, *, from_step: bool = False) -> int:
        """Fire every due reminder of this deployment's agents once; returns how many fired
        (skips included: they roll forward too). `from_step`: called inside a durable step."""
        now = self.runtime.clock.now()
        fired = 0
        for reminder in await self.store.due_reminders(now, limit=100):
            if reminder.agent_id not in self.runtime.agents:
                continue  # another deployment's agent on a shared database
            fire_time = reminder.next_fire_at
            try:
                await self._fire(reminder, fire_time, now, from_step)
            except Exception:  # one broken reminder never stops the others
                log.exception("reminder %s could not fire", reminder.id)
            await mark_fired(self.store, reminder, fire_time, now)
            fired += 1
        return fired

    async def _fire(self, reminder: Reminder, fire_time: datetime, now: datetime, from_step: bool) -> None:
        key = fire_key(reminder.id, fire_time)
        event_id = derived_id(fire_time, key)
        heartbeat = reminder.kind == HEARTBEAT_KIND
        skip = await self.skip_reason(reminder.agent_id, now, heartbeat=heartbeat)
        if skip is not None:
            await self.record(
                ActivityEntry(
                    id=event_id,
                    agent_id=reminder.agent_id,
                    at=now,
                    kind=reminder.kind,
                    reminder_id=reminder.id,
                    objective=reminder.objective,
                    outcome=f"skipped: {skip}",
                    provenance=reminder.provenance,
                )
            )
            return
        service, channel = AUTONOMOUS_SERVICE, "heartbeat" if heartbeat else "reminders"
        if reminder.action.service and reminder.action.channel:
            service, channel = reminder.action.service, reminder.action.channel
        home = channel_key(service, channel)
        text, read = reminder.objective, [reminder.provenance]
        if heartbeat:  # until its assessment says what it read: its own channel, nobody present
            read.append(_unknown_run(home))
        else:
            text, earlier = await self._reminder_text(reminder)
            read.extend(earlier)
        # The run starts from what its input holds; a heartbeat's assessment sets its own.
        await set_run_provenance(self.store, reminder.agent_id, event_id, derived_provenance(read, home))
        event = Event(
            id=event_id,
            agent_id=reminder.agent_id,
            kind=EventKind.HEARTBEAT if heartbeat else EventKind.REMINDER,
            service=service,
            channel=channel,
            speaker=None,
            text=text,
            received_at=now,
            addressed=True,
            meta={"reminder_id": reminder.id, "fire_time": fire_time.isoformat(), "fire_key": key},
        )
        self.tokens.watch(event_id)
        await self.runtime.submit(event, from_step=from_step)

    async def _reminder_text(self, reminder: Reminder) -> tuple[str, list[Provenance]]:
        lines = [f"My reminder (set {reminder.created_at:%Y-%m-%d}) has come due: {reminder.objective}"]
        if reminder.action.person_id:
            person = await self.store.get_person(reminder.agent_id, reminder.action.person_id)
            if person is not None:
                lines.append(f"It concerns {person.display_name}; what I say now reaches them here.")
        before = [
            e
            for e in await recent_activity(self.store, reminder.agent_id, limit=50)
            if e.reminder_id == reminder.id
        ][:2]
        for entry in before:
            lines.append(f"Last time it fired ({entry.at:%Y-%m-%d %H:%M}): {entry.outcome}")
        return "\n".join(lines), [entry.provenance for entry in before]

    async def skip_reason(self, agent_id: str, now: datetime, *, heartbeat: bool) -> str | None:
        config = self.runtime.settings.autonomy
        used = await self.tokens_used(agent_id, now)
        if used >= config.daily_token_budget:
            reason = (
                f"the autonomy budget of {config.daily_token_budget} tokens per 24 hours is used ({used}); "
                "runs resume as the window moves on"
            )
            log.warning("agent %s: %s", agent_id, reason)  # the operator's notice; also in `persyn activity`
            return reason
        recent = await recent_activity(self.store, agent_id, limit=_ACTIVITY_SCAN)
        ran = sum(
            1 for e in recent if e.at > now - timedelta(hours=1) and not e.outcome.startswith("skipped")
        )
        if ran >= config.max_runs_per_hour:
            return f"{ran} self-initiated runs in the last hour (limit {config.max_runs_per_hour})"
        if heartbeat and await self.runtime.busy(agent_id):
            return "busy: a conversation or another run is in progress"
        return None

    # accounting ------------------------------------------------------------------------
    async def tokens_used(self, agent_id: str, now: datetime) -> int:
        """Tokens of the self-initiated runs in the rolling window (the last 24 hours)."""
        return await window_tokens(self.store, agent_id, now)

    async def finish(self, event: Event, conversation_id: str, outcome: str) -> Conversation | None:
        """A self-initiated run is over: count its tokens, log it, close its conversation (one
        conversation per run; the caller enqueues its close hooks, which consolidate it into
        memory linked to the reminder). Returns the conversation if this call closed it."""
        now = self.runtime.clock.now()
        await asyncio.to_thread(self.runtime.meter.flush, 2.0)
        tokens = self.tokens.pop(event.id)
        reminder_id = str(event.meta.get("reminder_id", ""))
        provenance = await run_provenance(
            self.store, event.agent_id, event.id, channel_key(event.service, event.channel)
        )
        await self.record(
            ActivityEntry(
                id=event.id,
                agent_id=event.agent_id,
                at=now,
                kind=event.kind.value,
                reminder_id=reminder_id,
                objective=_objective(event),
                outcome=outcome,
                tokens=tokens,
                conversation_id=conversation_id,
                provenance=provenance,
            )
        )
        await self.store.set_flag(
            event.agent_id,
            RUN_FLAG + conversation_id,
            json.dumps(
                {
                    "kind": event.kind.value,
                    "reminder_id": reminder_id,
                    "sensitivity": provenance.sensitivity.value,
                }
            ),
        )
        return await self.store.close_conversation(event.agent_id, conversation_id, now)

    async def noticed(self, setup: TurnSetup, items: Sequence[Provenanced]) -> None:
        """A context source put `items` in front of the model: a self-initiated run writes at
        most where they may surface (a conversation turn writes with its own provenance)."""
        if setup.kind != "message":
            home = channel_key(setup.service, setup.channel)
            await narrow_run(self.store, setup.agent_id, setup.event_id, home, items)

    async def record(self, entry: ActivityEntry) -> None:
        await self.store.set_flag(entry.agent_id, ACTIVITY_FLAG + entry.id, entry.model_dump_json())


def _objective(event: Event) -> str:
    return event.text.splitlines()[0][:300] if event.text else ""


def run_kind(raw: str | None) -> dict[str, Any]:
    """The RUN_FLAG value of a conversation: {"kind", "reminder_id", "sensitivity"}, or {}."""
    if not raw:
        return {}
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def run_sensitivity(run: dict[str, Any]) -> Sensitivity:
    """The least sensitivity of a run's memory (`run_kind`): that of what it read. Public for
    a conversation no run caused; private when the flag is unreadable."""
    if not run:
        return Sensitivity.PUBLIC
    try:
        return Sensitivity(str(run.get("sensitivity", Sensitivity.PRIVATE.value)))
    except ValueError:
        return Sensitivity.PRIVATE
