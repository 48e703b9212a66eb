"""The activation's steps (SPEC §4): receive, engage, respond, critique, refine, decide, park,
and a self-initiated run's assess and finish. `runtime.durable.workflows` makes each a durable step;
here they are plain typed methods over explicit collaborators.

`TurnCache` holds what one activation reads once and several of its steps use: its event
(events never change once saved), the dialog as the turn sees it, the agent's latest emotion
readings and open goals (the prompt's and the decision's), and the records recalled earlier in
its conversation (read with the draft's prompt, for transmit). All are dropped at transmit; a crash simply reads them again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from persyn.cognition import deliberation, emotion, goals, pipeline, reflection
from persyn.cognition.context import recalled_ids
from persyn.cognition.deliberation import CritiqueOutcome, Decision
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import InputError
from persyn.core.events import Event
from persyn.core.ids import derived_id, id_time
from persyn.core.records import channel_key
from persyn.gateway.base import SinkCallable
from persyn.gateway.gateway import ModelGateway
from persyn.runtime.background.autonomy import set_run_provenance
from persyn.runtime.channel import Channel, safe_sink
from persyn.runtime.turn.models import ClosedRun, Draft, Received, TransmitResult
from persyn.runtime.turn.tool_steps import ToolSteps
from persyn.store.base import Conversation, Goal, Message, Role, Store
from persyn.store.capabilities import ScheduleStore, capability
from persyn.store.ports.emotions import EmotionReading, EmotionsPort, top_category
from persyn.usage import context as usage_context

__all__ = ["ActivationSteps", "RunCloser", "TurnCache", "record_deliberation"]

T = TypeVar("T")

_EVENT_CACHE_SIZE = 4096
_FINISHED_EVENTS = 64  # events kept after their transmit, for the background work that follows

ReplyBudget = Callable[[TurnSetup], Awaitable[str | None]]


class RunCloser(Protocol):
    """Logs and closes a self-initiated run (`runtime.background.autonomy.Autonomy`)."""

    async def finish(self, event: Event, conversation_id: str, outcome: str) -> Conversation | None: ...


class TurnCache:
    """The events and turn dialogs of the activations in flight in this process."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._readings: EmotionsPort | None = capability(store, EmotionsPort)
        self._schedule: ScheduleStore | None = capability(store, ScheduleStore)
        self._settings = settings
        self.events: dict[str, Event] = {}
        # The events and dialogs of the latest few activations whose transmit ran: their
        # deferred deliberation follows at once (the critics judge the dialog the reply
        # answered; refine's sink and the conclusion's channel need the event) and reads
        # neither again.
        self._finished: dict[str, Event] = {}
        self._finished_dialogs: dict[str, list[Message]] = {}
        self.dialogs: dict[str, list[Message]] = {}  # input last, by event id
        self._reading: dict[str, asyncio.Future[list[Message]]] = {}  # dialog reads in flight
        self._recalled: dict[str, asyncio.Future[list[str]]] = {}  # by event id, see `recalled`
        self._emotions: dict[str, asyncio.Future[list[EmotionReading]]] = {}  # by event id
        self._goals: dict[str, asyncio.Future[list[Goal]]] = {}  # by event id

    async def event(self, agent_id: str, event_id: str) -> Event:
        """The stored event. Events never change once saved, so each is read once per
        activation (receive; or handed over by `submit` in this process), kept for its respond
        and transmit, and dropped after."""
        event = self.events.get(event_id) or self._finished.get(event_id)
        if event is not None and event.agent_id == agent_id:
            return event
        event = await self._store.get_event(agent_id, event_id)
        if event is None:
            raise InputError(f"event {event_id!r} of agent {agent_id!r} is not stored")
        self.remember(event)
        return event

    def known(self, event_id: str) -> Event | None:
        """The event of an activation in flight here, if it is at hand (never a read)."""
        return self.events.get(event_id)

    def remember(self, event: Event) -> None:
        if len(self.events) >= _EVENT_CACHE_SIZE:  # activations that never reached transmit
            self.events.pop(next(iter(self.events)))
        self.events[event.id] = event

    async def dialog(self, setup: TurnSetup) -> list[Message]:
        """The current conversation's recent dialog as this turn sees it, its input last
        (`pipeline.read_turn_dialog`). Read once per activation in this process: the prompt,
        both critics, the decision, the engagement decision and the redundancy gate all judge
        the same dialog (what came before the input does not change); dropped at transmit."""
        cached = self.dialogs.get(setup.event_id)
        if cached is None:
            cached = self._finished_dialogs.get(setup.event_id)
        if cached is not None:
            return cached
        # Steps of one turn that start together (the draft's prompt and the decision on the
        # input) share one read rather than each making its own or waiting in turn.
        event_id = setup.event_id
        reading = self._reading.get(event_id)
        if reading is None:
            reading = asyncio.ensure_future(pipeline.read_turn_dialog(self._store, self._settings, setup))
            self._reading[event_id] = reading
            reading.add_done_callback(lambda _read: self._reading.pop(event_id, None))
        dialog = await asyncio.shield(reading)  # a cancelled reader leaves it to the others
        if len(self.dialogs) >= _EVENT_CACHE_SIZE:  # activations that never reached transmit
            self.dialogs.pop(next(iter(self.dialogs)))
        self.dialogs[setup.event_id] = dialog
        return dialog

    async def emotions(self, setup: TurnSetup, limit: int) -> list[EmotionReading]:
        """The agent's latest `limit` emotion readings, newest first, as this turn sees them:
        read once per activation in this process (as many as any of its steps shows, the
        `[emotion] trajectory`), for the reluctance at receive, the prompt's trajectory and the
        decision's current state alike; dropped at transmit. Readings are written after a
        turn (its `persyn.feel`), so a turn's steps judge one state, not one that changed
        between its draft and its decision. None without the store's emotion history."""
        readings = self._readings
        if readings is None:
            return []
        most = max(limit, self._settings.emotion.trajectory, 1)
        found = await _read_once(
            self._emotions, setup.event_id, lambda: readings.recent_emotions(setup.agent_id, most)
        )
        return list(found[:limit])

    async def open_goals(self, setup: TurnSetup) -> list[Goal]:
        """The agent's open goals as this turn sees them (`cognition.goals.open_goals`, before
        any access rule): read once per activation in this process for its prompt's goals
        section and its decision's preferences, which sift them each for where they may surface;
        dropped at transmit. A goal the turn's own tools set is in neither (like the emotion
        readings, a turn's steps judge one state). None without the store's goals."""
        schedule = self._schedule
        if schedule is None:
            return []
        return list(
            await _read_once(self._goals, setup.event_id, lambda: goals.open_goals(schedule, setup.agent_id))
        )

    def read_recalled(self, setup: TurnSetup) -> None:
        """Start reading the records recalled earlier in the turn's conversation, for its
        transmit: asked for with the draft's prompt, it joins that read batch instead of
        being a read of its own at transmit."""
        if setup.event_id in self._recalled:
            return
        if len(self._recalled) >= _EVENT_CACHE_SIZE:  # activations that never reached transmit
            self._recalled.pop(next(iter(self._recalled))).cancel()
        self._recalled[setup.event_id] = asyncio.ensure_future(
            recalled_ids(self._store, setup.agent_id, setup.conversation_id)
        )

    async def recalled(self, setup: TurnSetup) -> list[str]:
        """The records recalled earlier in the turn's conversation (`recalled_ids`): read with
        the draft's prompt when this process built it, otherwise now. Only a reply writes them
        (`remember_recalled`, with itself), so what was read for the turn is still what is
        stored when it transmits."""
        reading = self._recalled.pop(setup.event_id, None)
        if reading is not None and not reading.cancelled():
            with contextlib.suppress(Exception):  # a failed early read is simply read again
                return list(await reading)
        return await recalled_ids(self._store, setup.agent_id, setup.conversation_id)

    def drop(self, event_id: str) -> None:
        """Forget an activation's event, dialog, emotion readings and recalled ids (its transmit
        ran); its event and dialog stay at hand among the latest finished ones."""
        _keep_finished(self._finished, event_id, self.events.pop(event_id, None))
        _keep_finished(self._finished_dialogs, event_id, self.dialogs.pop(event_id, None))
        self._emotions.pop(event_id, None)
        self._goals.pop(event_id, None)
        reading = self._recalled.pop(event_id, None)
        if reading is not None and not reading.done():
            reading.cancel()


async def _read_once(
    reads: dict[str, asyncio.Future[T]], event_id: str, read: Callable[[], Awaitable[T]]
) -> T:
    """`read()` once per activation: every step of the turn awaits the same read (started by the
    first to ask, shared while it runs); a read that failed is made again by the next to ask."""
    reading = reads.get(event_id)
    if reading is None or (reading.done() and (reading.cancelled() or reading.exception() is not None)):
        if len(reads) >= _EVENT_CACHE_SIZE:  # activations that never reached transmit
            reads.pop(next(iter(reads)))
        reading = asyncio.ensure_future(read())
        reads[event_id] = reading
    return await asyncio.shield(reading)  # a cancelled reader leaves it to the others


def _keep_finished(kept: dict[str, T], event_id: str, value: T | None) -> None:
    if value is None:
        return
    if len(kept) >= _FINISHED_EVENTS:
        kept.pop(next(iter(kept)))
    kept[event_id] = value


async def record_deliberation(
    store: Store, agent_id: str, event_id: str, trace: dict[str, Any], at: datetime
) -> None:
    """What deliberation did for an event (critics, skips, decision), merged key by key into
    its trace: `persyn conversations show --deliberation` reads it."""
    await store.merge_deliberation(agent_id, event_id, trace, at)


def _no_sink(event: Event) -> SinkCallable | None:
    del event
    return None


class ActivationSteps:
    """The pipeline's steps for one deployment (every configured agent)."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        gateways: Mapping[str, ModelGateway],
        channels: Mapping[str, Channel],
        context_sources: Sequence[ContextSource],
        cache: TurnCache,
        tools: ToolSteps,
        reply_budget_spent: ReplyBudget,
        runs: RunCloser,
    ) -> None:
        self.settings = settings
        self.store = store
        self._emotions: EmotionsPort | None = capability(store, EmotionsPort)
        self.clock = clock
        self.agents = agents
        self.gateways = gateways
        self.channels = channels
        self.context_sources = context_sources
        self.cache = cache
        self.tools = tools
        self._reply_budget_spent = reply_budget_spent
        self._runs = runs
        # Where a turn's tokens go when its channel is connected in another process (the
        # runtime sets it where a live bus relays, PostgreSQL or Redis: `runtime/delivery/bus.py`).
        self.remote_sink: Callable[[Event], SinkCallable | None] = _no_sink

    def _sink(self, event: Event) -> SinkCallable | None:
        channel = self.channels.get(event.service)
        return safe_sink(channel, event) if channel is not None else self.remote_sink(event)

    # policy (deterministic: consulted in the workflow, outside the steps) ----------------
    def deliberation_mode(self, service: str) -> str:
        """Per-service override, else deferred on interactive channels, inline elsewhere."""
        config = self.settings.deliberation
        if service in config.channels:
            return config.channels[service]
        if config.mode != "auto":
            return config.mode
        channel = self.channels.get(service)
        return "deferred" if channel is not None and channel.interactive else "inline"

    def should_critique(self, text: str, agent_id: str | None = None) -> bool:
        config = self.settings.deliberation
        if not config.enabled or (agent_id is not None and self.tiny_deliberator(agent_id)):
            return False
        return deliberation.is_substantive(text, config.substantive_min_words)

    def tiny_deliberator(self, agent_id: str) -> bool:
        """Whether critique would run on the built-in tiny offline model, where it costs
        seconds per turn on one shared llama.cpp server and its objections are noise; then
        deliberation is skipped unless `[deliberation] offline_model = true`."""
        if self.settings.deliberation.offline_model:
            return False
        gateway = self.gateways.get(agent_id)
        if gateway is None:
            return False
        spec = gateway.spec_for(Task.CRITIQUE)
        return spec.provider == "local" and not spec.name

    def needs_decision(self, setup: TurnSetup, text: str) -> bool:
        """Whether the decision to speak needs a model: always for overheard traffic, for
        substantive replies and while the agent is in a state where it may decline optional
        requests (`TurnSetup.reluctant`); otherwise a short, plain answer to someone talking to
        the agent is sent on the deterministic gates alone (they still run in transmit)."""
        if not setup.addressed:
            return True
        if self.tiny_deliberator(setup.agent_id):
            return False
        return setup.reluctant or deliberation.is_substantive(
            text, self.settings.deliberation.substantive_min_words
        )

    def decides_on_input(self, setup: TurnSetup, text: str) -> bool:
        """Whether the deferred turn decides on its input, concurrently with the draft, so the
        decision costs no time of its own: a message addressed to the agent in deferred mode.
        With `[deliberation] decide_ahead` off, only where the input itself calls for a model
        decision (`_decision_due`: a substantive input mostly gets a substantive answer); then a
        plain input whose reply is substantive is decided on its draft afterwards, two model
        calls in a row. A decision made ahead of need is dropped when the draft comes back short
        and plain (`_respond_and_decide`). Overheard traffic keeps its engagement decision
        before any draft."""
        if setup.mode != "deferred" or setup.kind != "message" or not setup.addressed:
            return False
        if self.tiny_deliberator(setup.agent_id):
            return False
        return self.settings.deliberation.decide_ahead or self._decision_due(setup, text)

    def _decision_due(self, setup: TurnSetup, text: str) -> bool:
        """Whether the input alone calls for a model decision (a decision made on any other input
        is ahead of need: `[deliberation] decide_ahead`)."""
        return setup.reluctant or deliberation.is_substantive(
            text, self.settings.deliberation.substantive_min_words
        )

    # steps -----------------------------------------------------------------------------
    async def receive(self, agent_id: str, event_id: str) -> TurnSetup:
        event = await self.cache.event(agent_id, event_id)
        agent = self.agents[agent_id]
        setup = await pipeline.receive(self.store, self.settings, event, self.clock.now(), agent.name)
        return setup.model_copy(
            update={"mode": self.deliberation_mode(event.service), "reluctant": await self._reluctant(setup)}
        )

    async def _reluctant(self, setup: TurnSetup) -> bool:
        """Whether the agent's latest state is one in which it may decline optional requests
        (`[emotion] decline_when`). Read once, at receive: the turn's steps and a replay of
        them see the same answer."""
        config = self.settings.emotion
        if not config.enabled or not config.decline_when or setup.kind != "message" or not setup.addressed:
            return False
        latest = await self.cache.emotions(setup, 1)
        return bool(latest) and latest[0].top in config.decline_when

    async def receive_and_respond(self, agent_id: str, event_id: str) -> Received:
        """`receive`, then `respond` when the message is for the agent (`draft` None
        otherwise), and, when the turn decides on its input (`decides_on_input`), the
        decision concurrently with the draft."""
        setup = await self.receive(agent_id, event_id)
        # Overheard traffic needs an engagement decision first; a heartbeat, its
        # self-assessment (its own step): no draft here for either.
        if not setup.addressed or setup.kind == "heartbeat":
            return Received(setup=setup)
        with usage_context.rebind(
            surface=setup.service, channel=setup.channel, conversation_id=setup.conversation_id
        ):
            event = await self.cache.event(agent_id, event_id)
            # The decision made on the input weighs what the prompt does not read (the agent's
            # facts about itself): read with the prompt's context, so both model calls start
            # together (`_respond_and_decide`).
            ahead = self.decides_on_input(setup, event.text)
            weighing = asyncio.ensure_future(self._preferences(setup)) if ahead else None
            try:
                # The reply budget (read once for the whole step) is read with the prompt's
                # context, in one read batch: a spent budget wastes those reads, never a model call.
                over, prepared = await asyncio.gather(
                    self._reply_budget_spent(setup), self._prepare(agent_id, event_id, setup)
                )
                if over is not None:
                    return Received(setup=setup, draft=_over_budget(over))
                if weighing is None:
                    return Received(
                        setup=setup, draft=await self._generate(agent_id, event_id, setup, prepared)
                    )
                return await self._respond_and_decide(setup, prepared, weighing)
            finally:
                if weighing is not None and not weighing.done():
                    weighing.cancel()

    async def _respond_and_decide(
        self, setup: TurnSetup, prepared: pipeline.Prepared, weighing: asyncio.Future[str]
    ) -> Received:
        """The draft and the decision on the input, concurrently, in one step: a replay after
        the step bills neither again. When the draft comes back short and plain while the
        decision is still being made, the decision is cancelled: such a reply is sent on the
        deterministic gates alone, like any short, plain reply. Both read the turn's dialog (one
        read, `TurnCache.dialog`), and the decision's preferences (`weighing`) were read with the
        draft's prompt, so both model calls begin together; the reply budget was found unspent
        just before."""
        agent_id, event_id = setup.agent_id, setup.event_id
        step_key = usage_context.current().step_key

        async def decide() -> Decision:
            # Its own usage-id sequence: concurrent rounds of one step must not share ids.
            with usage_context.rebind(step_key=f"{step_key}:decide" if step_key else None):
                return await self.decide_on_input(agent_id, event_id, setup, await weighing)

        deciding = asyncio.ensure_future(decide())
        try:
            draft = await self._generate(agent_id, event_id, setup, prepared)
        except BaseException:
            deciding.cancel()
            raise
        failed = draft.reply.text is None  # nothing to send: transmit records why
        plain = not draft.reply.tool_calls and not self.needs_decision(setup, draft.text)
        # A decision made ahead of need (a plain input) never decides a plain reply: such a
        # reply keeps the model-free path, whether or not the decision had already come back.
        ahead = not self._decision_due(setup, (await self.cache.event(agent_id, event_id)).text)
        if (failed or plain) and (ahead or not deciding.done()):
            deciding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await deciding
            return Received(setup=setup, draft=draft)
        return Received(setup=setup, draft=draft, decision=await deciding)

    async def engage(self, agent_id: str, event_id: str, setup: TurnSetup) -> Decision:
        over = await self._reply_budget_spent(setup)
        if over is not None:  # no model call for a channel that gets no replies now
            return Decision(action="silent", reason=over)
        dialog = await self.cache.dialog(setup)
        return await deliberation.engage(self.gateways[agent_id], self.agents[agent_id], dialog)

    async def respond(self, agent_id: str, event_id: str, setup: TurnSetup) -> Draft:
        return await self._respond(agent_id, event_id, setup, await self._reply_budget_spent(setup))

    async def _respond(self, agent_id: str, event_id: str, setup: TurnSetup, over: str | None) -> Draft:
        """The draft, unless the channel's reply budget is spent (`over`, read by the caller)."""
        if over is not None:  # nothing is generated; transmit records why
            return _over_budget(over)
        return await self._generate(agent_id, event_id, setup, await self._prepare(agent_id, event_id, setup))

    async def _prepare(self, agent_id: str, event_id: str, setup: TurnSetup) -> pipeline.Prepared:
        """The draft's prompt: the dialog, the context sources and the parked conclusions
        (`pipeline.build_prompt`); transmit's recalled ids are read with them."""
        event = await self.cache.event(agent_id, event_id)
        self.cache.read_recalled(setup)
        return await pipeline.build_prompt(
            self.store,
            self.settings,
            self.agents[agent_id],
            setup,
            self.clock.now(),
            event.text,
            self.context_sources,
            read_dialog=lambda: self.cache.dialog(setup),
        )

    async def _generate(
        self, agent_id: str, event_id: str, setup: TurnSetup, prepared: pipeline.Prepared
    ) -> Draft:
        event = await self.cache.event(agent_id, event_id)
        sink = self._sink(event)
        tools = self.tools.specs(setup, event_id) if self.tools.offered(agent_id) else ()
        reply = await pipeline.respond(self.gateways[agent_id], prepared.prompt, sink, tools)
        return Draft(reply=reply, prepared=prepared)

    async def critique(
        self, agent_id: str, event_id: str, setup: TurnSetup, draft: Draft
    ) -> tuple[CritiqueOutcome, ...]:
        """Provenance plus one drawn lens, concurrently; each metered as its own stage."""
        prepared = _prepared(draft)
        lenses = [deliberation.PROVENANCE, deliberation.draw_lens(self.settings.deliberation, event_id)]
        dialog = await self.cache.dialog(setup)
        agent = self.agents[agent_id]
        gateway = self.gateways[agent_id]
        step_key = usage_context.current().step_key

        async def one(lens: str) -> CritiqueOutcome:
            # Own usage-id sequence per critic: concurrent rounds must not interleave ids.
            with usage_context.rebind(step_key=f"{step_key}:{lens}" if step_key else None):
                return await deliberation.critique(
                    gateway, lens, agent, prepared.evidence_items(), dialog, draft.text
                )

        return tuple(await asyncio.gather(*(one(lens) for lens in lenses)))

    async def refine(
        self,
        agent_id: str,
        event_id: str,
        draft: Draft,
        critiques: Sequence[CritiqueOutcome],
        *,
        live: bool = True,
    ) -> str | None:
        objections = [objection for outcome in critiques for objection in outcome.objections]
        sink = None
        if live:
            event = await self.cache.event(agent_id, event_id)
            sink = self._sink(event)
        return await deliberation.refine(
            self.gateways[agent_id], _prepared(draft).prompt, draft.text, objections, sink
        )

    async def _preferences(self, setup: TurnSetup) -> str:
        """What the decision weighs besides the configured rules (SPEC §4 step 6): quick
        facts about the agent itself, its open goals, its current emotional state."""
        return await emotion.decision_preferences(
            self.store,
            setup,
            self.settings.memory.channel_groups,
            self.settings.emotion,
            self.clock.now(),
            readings=self.cache.emotions,
            goals=self.cache.open_goals,
        )

    async def decide(self, agent_id: str, event_id: str, setup: TurnSetup, text: str) -> Decision:
        """The model's decision with its stated reason (SPEC §4 step 6)."""
        dialog, preferences = await asyncio.gather(self.cache.dialog(setup), self._preferences(setup))
        return await deliberation.decide(
            self.gateways[agent_id],
            self.agents[agent_id],
            dialog,
            text,
            addressed=setup.addressed,
            preferences=preferences,
        )

    async def decide_on_input(
        self, agent_id: str, event_id: str, setup: TurnSetup, preferences: str | None = None
    ) -> Decision:
        """Whether and how to answer the input, without the draft (deferred deliberation);
        `preferences` as read already (else read here)."""
        if preferences is None:
            dialog, preferences = await asyncio.gather(self.cache.dialog(setup), self._preferences(setup))
        else:
            dialog = await self.cache.dialog(setup)
        return await deliberation.decide_on_input(
            self.gateways[agent_id], self.agents[agent_id], dialog, preferences
        )

    async def feel(self, agent_id: str, event_id: str, conversation_id: str) -> None:
        """The agent's emotional state after an exchange (SPEC §4.9): one classifier call
        (stage `emotion`) over the exchange, kept as a reading keyed by the event. A failed
        or unusable answer keeps no reading; the reply was already sent. When the agent has
        answered again in the conversation since, this exchange is left to that reading; a
        trivially short one (`[emotion] min_words`) is not read; without the store's emotion
        history (`store/capabilities.py`) nothing is read."""
        if self._emotions is None:
            return
        dialog = await self.store.recent_messages(agent_id, conversation_id, 6)
        if not dialog or emotion.covered_by_later(dialog, event_id):
            return
        exchange = " ".join(m.text for m in dialog if m.event_id == event_id)
        if not emotion.worth_feeling(exchange, self.settings.emotion.min_words):
            return  # "hi" / "Hello!": nothing worth a classifier call
        distribution = await emotion.classify(
            self.gateways[agent_id], self.agents[agent_id], dialog, self.settings.emotion
        )
        if distribution is None:
            return
        await self._emotions.add_emotion_reading(
            EmotionReading(
                id=derived_id(id_time(event_id), event_id, "emotion"),
                agent_id=agent_id,
                created_at=self.clock.now(),
                conversation_id=conversation_id,
                event_id=event_id,
                distribution=distribution,
                top=top_category(distribution),
            )
        )

    async def park(
        self,
        agent_id: str,
        event_id: str,
        setup: TurnSetup,
        draft: Draft,
        critiques: Sequence[CritiqueOutcome],
        revised: str | None,
    ) -> None:
        """Keep a deferred conclusion for the next turn (only if there is something to fix)."""
        objections = [o for outcome in critiques for o in outcome.objections]
        trace = {"mode": "deferred", "critiques": [c.model_dump(mode="json") for c in critiques]}
        await record_deliberation(self.store, agent_id, event_id, trace, self.clock.now())
        if objections:
            parked = deliberation.Parked(
                event_id=event_id, draft=draft.text, revised=revised, objections=tuple(objections)
            )
            await pipeline.park(self.store, setup, parked, self.clock.now())
        event = await self.cache.event(agent_id, event_id)
        channel = self.channels.get(event.service)
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.deliberation_done(event, len(objections))

    # a self-initiated run (SPEC §4.7) -------------------------------------------------------
    async def assess(self, agent_id: str, event_id: str, setup: TurnSetup) -> reflection.SelfAssessment:
        """The heartbeat's self-assessment, kept in the run's conversation as what the agent
        thought (so the respond step that acts on it sees it in the dialog)."""
        agent = self.agents[agent_id]
        config = self.settings.autonomy
        # Only what may come to mind with nobody present; what the beat writes from here on
        # may surface at most where that may (SPEC §4 step 2, §4.7).
        review = await reflection.review_material(
            self.store,
            agent_id,
            channel_key(setup.service, setup.channel),
            self.settings.memory.channel_groups,
            records=config.review_records,
            goals=20,
        )
        await set_run_provenance(self.store, agent_id, event_id, review.provenance)
        now = self.clock.now()
        assessment = await reflection.assess(
            self.gateways[agent_id], agent, review.records, review.goals, now
        )
        serves = (
            "they serve my objectives" if assessment.serves_objectives else "they do not serve my objectives"
        )
        text = (
            f"My self-assessment: {assessment.patterns} ({serves}). "
            f"I choose to {assessment.intention.replace('_', ' ')}: {assessment.plan}"
        )
        await self.store.add_message(
            Message(
                id=derived_id(setup.received_at, event_id, "assessment"),
                agent_id=agent_id,
                conversation_id=setup.conversation_id,
                role=Role.SYSTEM,
                person_id=None,
                speaker_name="my self-assessment",
                text=text,
                created_at=max(now, setup.received_at + timedelta(microseconds=1)),
                event_id=event_id,  # part of this turn: the dialog shows it after the input
            )
        )
        return assessment

    async def finish_run(
        self, agent_id: str, event_id: str, setup: TurnSetup, result: TransmitResult
    ) -> ClosedRun | None:
        """After a self-initiated run: log it, count its tokens, close its conversation.
        Returns the closed conversation (its close hooks are enqueued by the workflow)."""
        event = await self.cache.event(agent_id, event_id)
        if result.transmitted:
            outcome = f"said: {(result.text or '')[:300]}"
        else:
            outcome = result.reason or "did nothing"
        conversation = await self._runs.finish(event, setup.conversation_id, outcome)
        return None if conversation is None else ClosedRun(conversation=conversation)


def _over_budget(reason: str) -> Draft:
    """No draft: the channel's reply budget is spent (transmit records why)."""
    return Draft(reply=pipeline.Reply(text=None, failure=reason), prepared=None, budget=reason)


def _prepared(draft: Draft) -> pipeline.Prepared:
    if draft.prepared is None:
        raise ValueError("a draft without a prompt cannot be deliberated")
    return draft.prepared
