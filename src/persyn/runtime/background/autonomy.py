"""What the agent does without being spoken to (SPEC §4.7, §4.8): reminders fire, the heartbeat
beats — each as an event through the agent's own queue and the full pipeline — under budgets.

The scheduler (`fire_due`: called by the timer armed to the next due reminder,
`reminder_timer.py`, and by the slow DBOS safety tick every `[autonomy] tick_seconds`) turns each due
reminder into an `Event` whose id is derived from `reminder_id@fire_time`, so however many
schedulers see it due, the activation runs once (the event id is the queue's dedup key),
then rolls the reminder forward or deletes it (`schedule.mark_fired`, compare-and-set).
Heartbeat events go through the same per-agent queue as messages, so a beat never overlaps
another beat or a conversation; a beat that finds the agent busy is skipped.

Self-initiated runs are bounded before they start (`skip_reason`): a token budget over a
rolling 24-hour window and a runs-per-hour cap per agent, counted from what earlier runs
actually used (kept with each run's activity entry). The budget also bounds a run while it
goes: every model request of a self-initiated run passes `BudgetedModel`, which first checks
the window (earlier runs plus what this one has spent so far, kept in the run's state in the store,
durable, so a run resumed after a crash or on another worker counts the same) and refuses the call with
`BudgetExhausted` once it is used — one beat's tool loop once spent 459,000 tokens against a
200,000-token budget checked only at its start. A run therefore overshoots by at most one
call; it then stops cleanly: the refused call degrades like any failed model call, nothing is
transmitted, and its activity entry says why. Skips, rests and outcomes land in the activity
log (the store's activity sub-port, a table indexed by agent and time), which `persyn heartbeat
status` and `persyn activity` show and the agent's introspection tool reads. Entries older
than `ACTIVITY_RETENTION` (90 days: far longer than the 24-hour budget window, long enough
for the operator's history) are purged whenever a run is logged.

A store without reminders or without the activity log (`store/capabilities.py`: the latter
keeps the budget) gives the agent no self-initiated run (no reminder fires, no heartbeat
beats); it answers what it is told as ever.

Provenance (ARCHITECTURE §4): a run writes — goals, facts, reminders, its activity
entry — with the provenance of what it read, kept in the run's state (`store/ports/runs.py`) for
the run's steps. A reminder's run starts from the reminder's own (and its earlier runs'); a
heartbeat's is set by its assessment (`cognition.reflection.review_material`); each tool
that shows the run something narrows it (`narrow_run`, `memory.access.derived_provenance`:
only ever narrower, so a replayed step changes nothing).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters

from persyn.cognition.pipeline import PRESENT_META, TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import Settings
from persyn.core.errors import ModelError
from persyn.core.events import Event, EventKind
from persyn.core.ids import derived_id, is_id
from persyn.core.records import Sensitivity, channel_key
from persyn.gateway.base import TokenUsage
from persyn.gateway.wrappers import CallHooks, HookedModel, token_usage
from persyn.memory.access import Provenanced, derived_provenance
from persyn.runtime.durable.dispatch import background_workflow_ids
from persyn.schedule import HEARTBEAT_KIND, fire_key, mark_fired
from persyn.store.base import Conversation, Provenance, Reminder, Store
from persyn.store.capabilities import capability
from persyn.store.ports.activity import OPERATOR_KIND, ActivityEntry, ActivityPort
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.runs import RunConversation, RunState
from persyn.store.ports.schedule import SchedulePort
from persyn.usage import context as usage_context

__all__ = [
    "ACTIVITY_RETENTION",
    "AUTONOMOUS_SERVICE",
    "ActivityEntry",
    "Autonomy",
    "BudgetExhausted",
    "BudgetedModel",
    "RunSpend",
    "narrow_run",
    "recent_activity",
    "run_provenance",
    "run_sensitivity",
    "set_run_provenance",
    "window_tokens",
]

log = logging.getLogger(__name__)

AUTONOMOUS_SERVICE = "self"  # the surface of self-initiated runs with no one to address
ACTIVITY_RETENTION = timedelta(days=90)  # how long the activity log keeps a run
_KNOWN_THREADS = 4096  # threads remembered as a self-initiated run's or not
_WINDOW = timedelta(hours=24)
_AUDIENCE_CONVERSATIONS = 20  # a channel's latest conversations whose people a run speaks in front of
_ACTIVITY_SCAN = 500


def _unknown_run(home: str) -> Provenance:
    """A run whose provenance was never recorded: its own channel, with nobody present."""
    return Provenance(channel=home, sensitivity=Sensitivity.PRIVATE)


async def run_provenance(store: Store, agent_id: str, event_id: str, home: str) -> Provenance:
    """The provenance of what run `event_id` writes (`home`: the run's channel)."""
    state = await store.get_run(agent_id, event_id)
    if state is None or state.provenance is None:
        return _unknown_run(home)
    return state.provenance


async def set_run_provenance(
    store: Store, agent_id: str, event_id: str, provenance: Provenance, now: datetime | None = None
) -> None:
    def replace(state: RunState) -> RunState:
        return state.model_copy(update={"provenance": provenance})

    await store.update_run(agent_id, event_id, replace, now or datetime.now(UTC))


async def narrow_run(
    store: Store,
    agent_id: str,
    event_id: str,
    home: str,
    items: Sequence[Provenanced],
    now: datetime | None = None,
) -> None:
    """The run read `items`: from now on it writes at most where they may surface too."""
    if not items:
        return

    def narrow(state: RunState) -> RunState:
        current = state.provenance or _unknown_run(home)
        return state.model_copy(update={"provenance": derived_provenance([current, *items], home)})

    await store.update_run(agent_id, event_id, narrow, now or datetime.now(UTC))


async def recent_activity(
    store: ActivityPort | None, agent_id: str, limit: int = 20, kind: str | None = None
) -> list[ActivityEntry]:
    """The newest first (none without the activity log)."""
    if store is None:
        return []
    return await store.recent_activity(agent_id, limit=limit, kind=kind)


async def window_tokens(store: ActivityPort | None, agent_id: str, now: datetime) -> int:
    """Tokens the agent's self-initiated runs used in the last 24 hours (rolling window)."""
    if store is None:
        return 0  # no log, no run (`Autonomy.fire_due`): nothing was spent
    return await store.activity_tokens(agent_id, now - _WINDOW, now)


class RunSpend(BaseModel):
    """What one self-initiated run has spent so far, and why it was stopped, if it was."""

    tokens: int = 0
    stopped: str | None = None


class BudgetExhausted(ModelError):
    """A self-initiated run has used the autonomy budget: it makes no more model calls."""


class RunHost(Protocol):
    """What self-initiated runs need of the deployment: submitting their events, whether an
    agent is busy, and the events of activations in flight here."""

    async def submit(self, event: Event, *, from_step: bool = False) -> str: ...

    async def busy(self, agent_id: str) -> bool: ...

    def known_event(self, event_id: str) -> Event | None: ...


@dataclass
class Autonomy:
    """Self-initiated runs (SPEC §4.7): firing reminders and the heartbeat, their budget,
    and their log."""

    store: Store
    clock: Clock
    settings: Settings
    agent_ids: Collection[str]
    host: RunHost
    _runs: dict[str, Event | None] = field(default_factory=dict)  # thread id -> its run, if one
    activity: ActivityPort | None = field(init=False)  # the store's activity log, if it has one
    schedule: SchedulePort | None = field(init=False)  # its reminders, if it has them
    history: DialogHistoryPort | None = field(init=False)  # its dialog history, if it has one

    def __post_init__(self) -> None:
        self.activity = capability(self.store, ActivityPort)
        self.schedule = capability(self.store, SchedulePort)
        self.history = capability(self.store, DialogHistoryPort)

    # firing ----------------------------------------------------------------------------
    async def fire_due(self, *, from_step: bool = False) -> int:
        """Fire every due reminder of this deployment's agents once; returns how many fired
        (skips included: they roll forward too). `from_step`: called inside a durable step."""
        schedule = self.schedule
        if schedule is None or self.activity is None:
            return 0  # no reminders, or no log to keep the budget with: no self-initiated run
        now = self.clock.now()
        fired = 0
        for reminder in await schedule.due_reminders(now, limit=100):
            if reminder.agent_id not in self.agent_ids:
                continue  # another deployment's agent on a shared database
            fire_time = reminder.next_fire_at
            try:
                await self._fire(reminder, fire_time, now, from_step)
            except Exception:  # one broken reminder never stops the others
                log.exception("reminder %s could not fire", reminder.id)
            await mark_fired(schedule, reminder, fire_time, now)
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
        await set_run_provenance(
            self.store, reminder.agent_id, event_id, derived_provenance(read, home), self.clock.now()
        )
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
            meta={
                "reminder_id": reminder.id,
                "fire_time": fire_time.isoformat(),
                "fire_key": key,
                PRESENT_META: ",".join(await self._audience(reminder, service, channel)),
            },
        )
        await self.host.submit(event, from_step=from_step)

    async def _audience(self, reminder: Reminder, service: str, channel: str) -> list[str]:
        """Who reads what a run says on its channel, so it recalls only what may surface in
        front of them (SPEC §4 step 2): the reminder's person and everyone seen in the
        channel's recent conversations. A run with no channel of its own has no audience.
        More people present can only withhold (`memory.access` is monotone in them)."""
        people = [reminder.action.person_id] if reminder.action.person_id else []
        if service == AUTONOMOUS_SERVICE:
            return []
        if self.history is None:
            # Who else reads the channel is unknown (no dialog history): someone no memory
            # formed with stands for them, so only what may surface before anyone does.
            return [*people, derived_id(reminder.created_at, reminder.id, "unknown audience")]
        for conversation in await self.history.list_conversations(
            reminder.agent_id, channel=channel, limit=_AUDIENCE_CONVERSATIONS
        ):
            if conversation.service == service:
                people.extend(conversation.participant_ids)
        return list(dict.fromkeys(people))

    async def _reminder_text(self, reminder: Reminder) -> tuple[str, list[Provenance]]:
        lines = [f"My reminder (set {reminder.created_at:%Y-%m-%d}) has come due: {reminder.objective}"]
        if reminder.action.person_id:
            person = await self.store.get_person(reminder.agent_id, reminder.action.person_id)
            if person is not None:
                lines.append(f"It concerns {person.display_name}; what I say now reaches them here.")
        before = [
            e
            for e in await recent_activity(self.activity, reminder.agent_id, limit=50)
            if e.reminder_id == reminder.id
        ][:2]
        for entry in before:
            lines.append(f"Last time it fired ({entry.at:%Y-%m-%d %H:%M}): {entry.outcome}")
        return "\n".join(lines), [entry.provenance for entry in before]

    async def skip_reason(self, agent_id: str, now: datetime, *, heartbeat: bool) -> str | None:
        config = self.settings.autonomy
        used = await self.tokens_used(agent_id, now)
        if used >= config.daily_token_budget:
            reason = (
                f"the autonomy budget of {config.daily_token_budget} tokens per 24 hours is used ({used}); "
                "runs resume as the window moves on"
            )
            log.warning("agent %s: %s", agent_id, reason)  # the operator's notice; also in `persyn activity`
            return reason
        recent = await recent_activity(self.activity, agent_id, limit=_ACTIVITY_SCAN)
        ran = sum(
            1
            for e in recent
            if e.at > now - timedelta(hours=1)
            and e.kind != OPERATOR_KIND  # an operator's action is logged here, but is no run
            and not e.outcome.startswith("skipped")
        )
        if ran >= config.max_runs_per_hour:
            return f"{ran} self-initiated runs in the last hour (limit {config.max_runs_per_hour})"
        if heartbeat and await self.host.busy(agent_id):
            return "busy: a conversation or another run is in progress"
        return None

    # accounting ------------------------------------------------------------------------
    async def tokens_used(self, agent_id: str, now: datetime) -> int:
        """Tokens of the self-initiated runs in the rolling window (the last 24 hours)."""
        return await window_tokens(self.activity, agent_id, now)

    async def finish(self, event: Event, conversation_id: str, outcome: str) -> Conversation | None:
        """A self-initiated run is over: count its tokens, log it, close its conversation (one
        conversation per run; the caller enqueues its close hooks, which consolidate it into
        memory linked to the reminder). Returns the conversation if this call closed it."""
        now = self.clock.now()
        tokens = (await self.spent(event)).tokens
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
        await self.store.set_run_conversation(
            RunConversation(
                agent_id=event.agent_id,
                conversation_id=conversation_id,
                run_id=event.id,
                kind=event.kind.value,
                reminder_id=reminder_id,
                sensitivity=provenance.sensitivity,
                created_at=now,
            )
        )
        if self.history is None:
            return None  # it closes once idle, as any conversation (`close_idle_conversations`)
        return await self.history.close_conversation(event.agent_id, conversation_id, now)

    # the budget while a run goes ------------------------------------------------------------
    async def admit_call(self, agent_id: str | None, thread_id: str | None, tokens: int = 0) -> Event | None:
        """Before a model call (one known to cost `tokens`: a transcription): the
        self-initiated run it belongs to (None: not one), or `BudgetExhausted` when the
        autonomy budget is used — recorded on the run first — or when this call would take
        the run past it (the run goes on; this call is not made)."""
        event = await self._run_of(agent_id, thread_id)
        if event is None:
            return None
        config = self.settings.autonomy
        spent = await self.spent(event)
        if spent.stopped is not None:
            raise BudgetExhausted(spent.stopped)
        now = self.clock.now()
        used = await self.tokens_used(event.agent_id, now) + spent.tokens
        if used < config.daily_token_budget and used + tokens > config.daily_token_budget:
            raise BudgetExhausted(
                f"this would take {tokens} tokens of the autonomy budget of {config.daily_token_budget} "
                f"per 24 hours, of which {config.daily_token_budget - used} are left"
            )
        if used < config.daily_token_budget:
            return event
        reason = (
            f"stopped: the autonomy budget of {config.daily_token_budget} tokens per 24 hours is used "
            f"({used}); this run makes no more model calls"
        )
        log.warning("agent %s, run %s: %s", event.agent_id, event.id, reason)

        def stop(state: RunState) -> RunState:
            return state.model_copy(update={"stopped": reason})

        await self.store.update_run(event.agent_id, event.id, stop, now)
        raise BudgetExhausted(reason)

    async def admit_current(self, audio_seconds: float = 0.0) -> Callable[[float], Awaitable[None]] | None:
        """`admit_call` for the attribution in force: the gateway's admission of a call that is
        not a chat round-trip (a transcription of about `audio_seconds`, counted as `[autonomy]
        tokens_per_audio_second` each), refused with `BudgetExhausted` like any call. Returns
        what charges the seconds heard to the run once the call succeeded (None: no run)."""
        attribution = usage_context.current()
        rate = self.settings.autonomy.tokens_per_audio_second
        run = await self.admit_call(
            attribution.agent_id, attribution.thread_id, math.ceil(audio_seconds * rate)
        )
        if run is None:
            return None

        async def settle(seconds: float) -> None:
            await self.charge(run, TokenUsage(input_tokens=math.ceil(seconds * rate)))

        return settle

    async def charge(self, event: Event, usage: TokenUsage) -> None:
        """After a model call of a self-initiated run: add what it used to the run's spend."""
        tokens = usage.input_tokens + usage.output_tokens

        def add(state: RunState) -> RunState:
            return state.model_copy(update={"tokens": state.tokens + tokens})

        await self.store.update_run(event.agent_id, event.id, add, self.clock.now())

    async def spent(self, event: Event) -> RunSpend:
        state = await self.store.get_run(event.agent_id, event.id)
        return RunSpend() if state is None else RunSpend(tokens=state.tokens, stopped=state.stopped)

    async def _run_of(self, agent_id: str | None, thread_id: str | None) -> Event | None:
        """The event of the self-initiated run whose activation is `thread_id` (an
        activation's workflow id is its event id), looked up once per thread. The background
        workflows an activation starts (its deferred deliberation, emotion reading, extraction)
        run on threads of their own, named after its event and never an event themselves: they
        are known as no run as soon as the activation is, without a read each."""
        if agent_id is None or thread_id is None or not is_id(thread_id):
            return None
        if thread_id in self._runs:
            return self._runs[thread_id]
        event = self.host.known_event(thread_id) or await self.store.get_event(agent_id, thread_id)
        run = event if event is not None and event.kind is not EventKind.MESSAGE else None
        self._know(thread_id, run)
        if event is not None:
            for background in background_workflow_ids(thread_id):
                self._know(background, None)
        return run

    def _know(self, thread_id: str, run: Event | None) -> None:
        if len(self._runs) >= _KNOWN_THREADS:
            self._runs.pop(next(iter(self._runs)))
        self._runs[thread_id] = run

    async def noticed(self, setup: TurnSetup, items: Sequence[Provenanced]) -> None:
        """A context source put `items` in front of the model: a self-initiated run writes at
        most where they may surface (a conversation turn writes with its own provenance)."""
        if setup.kind != "message":
            home = channel_key(setup.service, setup.channel)
            await narrow_run(self.store, setup.agent_id, setup.event_id, home, items, self.clock.now())

    async def record(self, entry: ActivityEntry) -> None:
        """Log a run, and let go of the runs older than the retention."""
        if self.activity is None:
            return
        await self.activity.add_activity(entry)
        await self.activity.purge_activity(entry.agent_id, entry.at - ACTIVITY_RETENTION)


class BudgetedModel(HookedModel):
    """A task's model with the autonomy budget checked before, and charged after, every
    request a self-initiated run makes (the attribution's thread says which run it serves).
    The gateway wraps each task's model with it (`ModelGateway(wrappers=...)`), so every
    round-trip is admitted and charged, however the `complete` call around it ends: one that
    raises after spending tokens (structured output invalid twice) was billed for each
    round-trip that returned. Calls outside such runs pass straight through (the consolidation
    of a run's conversation, enqueued on a thread of its own, is one of them)."""

    def __init__(self, wrapped: Model, autonomy: Autonomy) -> None:
        super().__init__(wrapped)
        self._autonomy = autonomy

    async def _hooks(self, messages: list[ModelMessage], params: ModelRequestParameters) -> CallHooks:
        attribution = usage_context.current()
        run = await self._autonomy.admit_call(attribution.agent_id, attribution.thread_id)
        if run is None:
            return CallHooks(params)

        async def charge(response: ModelResponse) -> None:
            await self._autonomy.charge(run, token_usage(response.usage))

        return CallHooks(params, after=charge)


def _objective(event: Event) -> str:
    return event.text.splitlines()[0][:300] if event.text else ""


def run_sensitivity(run: RunConversation | None) -> Sensitivity:
    """The least sensitivity of a conversation's memory: that of what the run that caused it
    read; public for a conversation no run caused."""
    return Sensitivity.PUBLIC if run is None else run.sensitivity
