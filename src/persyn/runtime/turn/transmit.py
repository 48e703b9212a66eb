"""Transmit (SPEC §4 step 7): act on the decision — speak, decline in words, redirect, or stay
silent — through the hard gates, the target, the record and the delivery.

Exactly one completion marker per event, whatever happened (SPEC App. B). What is said is
recorded in the dialog with its marker and its outbox row in one store transaction (a reply
recorded is a reply on its way: no crash between leaves it undelivered), counted against the
channel's reply budget, then delivered through the outbox (`runtime/delivery/outbox.py`): at once when
its channel is connected in this process, otherwise by whichever process connects it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from persyn.cognition import deliberation, pipeline
from persyn.cognition.context import remember_recalled
from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.events import LIVE_HELD, CompletionMarker, Event, Notice, Outbound
from persyn.core.ids import derived_id
from persyn.runtime.background.autonomy import AUTONOMOUS_SERVICE, RunSpend
from persyn.runtime.background.guardrails import block_reason
from persyn.runtime.background.outreach import Outreach
from persyn.runtime.channel import Channel
from persyn.runtime.delivery.outbox import Outbox, reply_key
from persyn.runtime.turn.activation import TurnCache, record_deliberation
from persyn.runtime.turn.live import is_background
from persyn.runtime.turn.models import AUTO_SPEAK, Draft, TransmitRequest, TransmitResult
from persyn.runtime.turn.pacing import PacingHold
from persyn.store import Store
from persyn.store.base import Message, ReplyUpkeep, Role
from persyn.store.capabilities import capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.guardrails import GuardrailEvent
from persyn.store.ports.outbox import OutboxRow

__all__ = ["Transmitter"]

log = logging.getLogger(__name__)


class CompletionMarkers(Protocol):
    """The completion markers waiters in this process are woken by (`durable/dispatch.Markers`):
    the events whose transmit runs here now, a marker put for a waiter here, the wake-up."""

    transmitting: set[str]

    def put(self, marker: CompletionMarker) -> None: ...

    def wake(self, event_id: str) -> None: ...


class RunSpending(Protocol):
    """What a self-initiated run has spent, and whether the autonomy budget stopped it
    (`runtime.background.autonomy.Autonomy`)."""

    async def spent(self, event: Event) -> RunSpend: ...


class PacingGate(Protocol):
    """The last pacing safeguards before a reply is recorded (`runtime.turn.pacing.Pacing`)."""

    async def hold(self, setup: TurnSetup, text: str) -> PacingHold: ...


class GuardrailGate(Protocol):
    """The guardrails' hard gate (`runtime.background.guardrails.Guardrails`): the block in force on a
    turn's person, channel or agent, if any."""

    async def blocking(self, setup: TurnSetup) -> GuardrailEvent | None: ...


class Transmitter:
    """The transmit step's work, given its collaborators: the store, settings and clock, the
    connected channels (`channels(service)`), the outbox, the reply budget (`outreach`), the
    turn cache (the event and the dialog the turn read), the autonomy spend of a run, and the
    markers that waiters in this process are woken by."""

    def __init__(
        self,
        *,
        store: Store,
        settings: Settings,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        channels: Callable[[str], Channel | None],
        outbox: Outbox,
        outreach: Outreach,
        cache: TurnCache,
        markers: CompletionMarkers,
        runs: RunSpending,
        pacing: PacingGate | None = None,
        guardrails: GuardrailGate | None = None,
    ) -> None:
        self._store = store
        self._history: DialogHistoryPort | None = capability(store, DialogHistoryPort)
        self._settings = settings
        self._clock = clock
        self._agents = agents
        self._channels = channels
        self._outbox = outbox
        self._outreach = outreach
        self._cache = cache
        self._markers = markers
        self._runs = runs
        self._pacing = pacing
        self._guardrails = guardrails

    async def gate(self, setup: TurnSetup, text: str) -> deliberation.Decision | None:
        """Hard gates before anything is sent: silence instead, with the reason, or None."""
        if not deliberation.clean_for_transmit(text):
            return deliberation.Decision(action="silent", reason="nothing was left to say")
        if not deliberation.may_be_redundant(text):
            return None
        dialog = await self._cache.dialog(setup)
        echo = deliberation.redundant_with(
            text,
            dialog,
            self._settings.deliberation.redundancy_threshold,
            asker=setup.person_id if setup.addressed else None,
            own_event=setup.event_id if setup.kind != "message" else None,
        )
        if echo is not None:
            return deliberation.Decision(
                action="silent", reason=f"{echo.speaker_name} already said what I would have said"
            )
        return None

    async def _recalled(self, setup: TurnSetup, draft: Draft | None) -> set[str]:
        """The records recalled for this turn (its prompt's evidence) and before it in the
        conversation: their ids never leave the agent."""
        ids = set(await self._cache.recalled(setup))
        if draft is not None and draft.prepared is not None:
            ids.update(item.record_id for item in draft.prepared.evidence_items())
        return ids

    async def transmit(
        self, agent_id: str, event_id: str, setup: TurnSetup, outcome: TransmitRequest
    ) -> TransmitResult:
        """Act on the decision: speak (or decline, in words), redirect, or stay silent.

        Exactly one completion marker per event, whatever happened (SPEC App. B). A waiter
        in this process is woken once the surface has been given the outcome; the turn's
        cached event and dialog are dropped (transmit is the last step that needs them)."""
        self._markers.transmitting.add(event_id)
        try:
            event = await self._cache.event(agent_id, event_id)
            return await self._transmit(event, setup, outcome)
        finally:
            self._markers.transmitting.discard(event_id)
            self._cache.drop(event_id)
            self._markers.wake(event_id)

    # a turn the storage refused (runtime/durable/_storage_full.py) ----------------------------------
    async def tell_unanswered(self, agent_id: str, event_id: str, reason: str) -> None:
        """Without writing anything (the disk may be full): a waiter in this process gets an
        unanswered completion marker now, and the event's surface a notice; nothing when the
        event was answered before the failure (its marker is stored: reading needs no room)."""
        now = self._clock.now()
        with contextlib.suppress(Exception):
            if await self._store.get_marker(agent_id, event_id, now) is not None:
                return
        self._markers.put(self._unsent_marker(event_id, reason, now))
        self._markers.wake(event_id)
        with contextlib.suppress(Exception):  # reading the event needs no room; best effort
            event = await self._cache.event(agent_id, event_id)
            await _safe_notice(self._channels(event.service), event, Notice(level="error", text=reason))

    async def record_unanswered(
        self, agent_id: str, event_id: str, reason: str, detail: str
    ) -> TransmitResult:
        """Record that the event's turn ended on a storage failure; raises while the store still
        refuses. The event gets an unanswered completion marker unless it has one already (a
        reply sent before the failure keeps its own), and its trace says what failed."""
        now = self._clock.now()
        marker = await self._store.get_marker(agent_id, event_id, now)
        if marker is None:
            marker = self._unsent_marker(event_id, reason, now)
            await self._store.put_marker(agent_id, marker)
        await self._record_deliberation(agent_id, event_id, {"failed": detail})
        self._cache.drop(event_id)
        return TransmitResult(
            transmitted=marker.transmitted,
            action=None if marker.transmitted else "failed",
            text=marker.text,
            reason=marker.reason,
        )

    def _unsent_marker(self, event_id: str, reason: str, now: datetime) -> CompletionMarker:
        ttl = timedelta(seconds=self._settings.dispatch.marker_ttl_seconds)
        return CompletionMarker(
            event_id=event_id, transmitted=False, reason=reason, created_at=now, expires_at=now + ttl
        )

    async def _record_deliberation(self, agent_id: str, event_id: str, trace: dict[str, Any]) -> None:
        await record_deliberation(self._store, agent_id, event_id, trace, self._clock.now())

    async def _run_stopped(self, event: Event) -> str | None:
        return (await self._runs.spent(event)).stopped

    async def _transmit(self, event: Event, setup: TurnSetup, outcome: TransmitRequest) -> TransmitResult:
        """The gates that refuse before any words, the hard gate on the words, then (not silent)
        the words and where they go, pacing, the record and the delivery."""
        now = self._clock.now()
        sending = _Transmission(
            event=event,
            setup=setup,
            outcome=outcome,
            began=now,
            said_at=now,
            ttl=timedelta(seconds=self._settings.dispatch.marker_ttl_seconds),
            origin=self._channels(event.service),
        )
        refused = await self._refused(sending)
        if refused is not None:
            return refused
        decision = outcome.decision
        if decision is not None and decision.action in ("speak", "redirect"):
            decision = await self.gate(setup, outcome.text or "") or decision
        trace = _deliberation_trace(setup, outcome, decision)
        if decision is None or decision.action == "silent":
            if trace is not None:
                await self._record_deliberation(setup.agent_id, event.id, trace)
            reason = decision.reason if decision is not None else "no decision"
            return await self._unsent(
                sending, f"{self._agents[setup.agent_id].name} chose silence: {reason}", "info"
            )
        recalled = await self._recalled(setup, outcome.draft)
        text = deliberation.clean_for_transmit(outcome.text or "", recalled)
        if is_background(event):  # a live call's background turn: held for the next answer
            if decision.action == "decline":
                text = deliberation.clean_for_transmit(decision.message or "", recalled) or text
            return await self._held(sending, text, trace)
        route = _Route(target=sending.origin, service=event.service, channel=event.channel)
        if decision.action == "decline":
            text = (
                deliberation.clean_for_transmit(decision.message or "", recalled)
                or f"I'd rather not. {decision.reason}"
            )
            route = replace(route, reason=f"declined: {decision.reason}")
        elif decision.action == "redirect":
            route = await self._redirect_route(sending, decision)
        paced = await self._paced(sending, text)
        if paced is not None:
            return paced
        message = await self._record_reply(sending, route, text, trace)
        await self._deliver(sending, route)
        return TransmitResult(
            transmitted=True,
            action=decision.action,
            text=message.text,
            message_id=message.id,
            reason=route.reason,
        )

    async def _held(self, sending: _Transmission, text: str, trace: dict[str, Any] | None) -> TransmitResult:
        """A live call's background turn (`runtime.turn.live`): its words are not sent, nor
        stored as a line of the agent's (the fast model spoke for the turn); the completion
        marker carries them to the call, which weaves them into its next answer."""
        agent_id = sending.setup.agent_id
        if trace is not None:
            await self._record_deliberation(agent_id, sending.event.id, trace)
        marker = CompletionMarker(
            event_id=sending.event.id,
            transmitted=False,
            text=text or None,
            reason=LIVE_HELD,
            created_at=sending.began,
            expires_at=sending.began + sending.ttl,
        )
        await self._store.put_marker(agent_id, marker)
        self._markers.put(marker)
        return TransmitResult(transmitted=False, action="held", text=text or None, reason=LIVE_HELD)

    async def _unsent(self, sending: _Transmission, reason: str, level: str) -> TransmitResult:
        """Not sent: the event's marker says why, and its surface is told."""
        marker = CompletionMarker(
            event_id=sending.event.id,
            transmitted=False,
            reason=reason,
            created_at=sending.began,
            expires_at=sending.began + sending.ttl,
        )
        await self._store.put_marker(sending.setup.agent_id, marker)
        self._markers.put(marker)
        await _safe_notice(sending.origin, sending.event, Notice(level=level, text=reason))
        return TransmitResult(transmitted=False, reason=reason)

    async def _refused(self, sending: _Transmission) -> TransmitResult | None:
        """The gates that refuse before the words are looked at: a self-initiated run the
        autonomy budget stopped, a guardrail block, the channel's spent reply budget, a draft
        that failed. None: none of them refuses."""
        setup, draft = sending.setup, sending.outcome.draft
        agent_id, event_id = setup.agent_id, sending.event.id
        if setup.kind != "message":  # a self-initiated run the autonomy budget stopped says so
            stopped = await self._run_stopped(sending.event)
            if stopped is not None:
                return await self._unsent(sending, stopped, "info")
        if self._guardrails is not None:  # SPEC §4.10: the hard gate, on every transmission
            blocked = await self._guardrails.blocking(setup)
            if blocked is not None:
                reason = block_reason(blocked)
                silenced = deliberation.Decision(action="silent", reason=reason)
                await self._record_deliberation(
                    agent_id,
                    event_id,
                    {
                        "mode": setup.mode,
                        "decision": silenced.model_dump(mode="json"),
                        "guardrail": blocked.id,
                    },
                )
                return await self._unsent(
                    sending, f"{self._agents[agent_id].name} chose silence: {reason}", "info"
                )
        if draft is not None and draft.budget:  # the channel's reply budget is used
            skipped = deliberation.Decision(action="silent", reason=draft.budget)
            await self._record_deliberation(
                agent_id, event_id, {"mode": setup.mode, "decision": skipped.model_dump(mode="json")}
            )
            return await self._unsent(sending, draft.budget, "info")
        if draft is not None and draft.reply.text is None:
            return await self._unsent(sending, f"I could not produce a reply: {draft.reply.failure}", "error")
        return None

    async def _redirect_route(self, sending: _Transmission, decision: deliberation.Decision) -> _Route:
        """Where a redirected reply goes: the channel asked for when it is connected here and
        no one reads it who was not in this conversation, else back where it was asked."""
        event = sending.event
        here = _Route(target=sending.origin, service=event.service, channel=event.channel)
        service, _, channel_name = (decision.redirect_to or "").partition(":")
        target = self._channels(service)
        if target is None or not channel_name:
            return replace(
                here, reason=f"wanted to redirect to {decision.redirect_to!r}, which is not available here"
            )
        if not await self._may_redirect(event, sending.setup, service, channel_name):
            return replace(
                here,
                reason=(
                    f"wanted to redirect to {decision.redirect_to!r}, where someone who is not here could "
                    "read it; answered here instead"
                ),
            )
        return _Route(
            target=target,
            service=service,
            channel=channel_name,
            reason=f"redirected to {decision.redirect_to}: {decision.reason}",
            redirected=True,
        )

    async def _paced(self, sending: _Transmission, text: str) -> TransmitResult | None:
        """SPEC §4.5: budgets, intervals, delays (recorded when they act). A hold that ends in
        silence is the turn's outcome; one that waited moves the reply's time to its end."""
        if self._pacing is None:
            return None
        setup = sending.setup
        held = await self._pacing.hold(setup, text)
        if held.silent is not None:
            paced = deliberation.Decision(action="silent", reason=held.silent)
            await self._record_deliberation(
                setup.agent_id,
                sending.event.id,
                {"mode": setup.mode, "decision": paced.model_dump(mode="json")},
            )
            return await self._unsent(sending, held.silent, "info")
        if held.record is not None:
            await self._record_deliberation(setup.agent_id, sending.event.id, {"pacing": held.record})
        sending.said_at = self._clock.now()  # the reply is said when the hold ends
        return None

    async def _record_reply(
        self, sending: _Transmission, route: _Route, text: str, trace: dict[str, Any] | None
    ) -> Message:
        """The reply, its marker, its outbox row and the turn's bookkeeping (the deliberation
        trace, the reply budget's entry, the parked conclusions it carried, now spent) in one
        transaction: a reply recorded is on its way, whichever process delivers it (a crash
        after this loses nothing), and one write is the cheapest a turn can make."""
        setup, draft = sending.setup, sending.outcome.draft
        agent_id, event_id, now = setup.agent_id, sending.event.id, sending.said_at
        agent = self._agents[agent_id]
        made: list[CompletionMarker] = []

        def marker(message: Message) -> CompletionMarker:
            made.append(
                CompletionMarker(
                    event_id=event_id,
                    transmitted=True,
                    text=message.text,
                    reason=route.reason,
                    created_at=now,
                    expires_at=now + sending.ttl,
                )
            )
            return made[-1]

        def outbox_row(message: Message) -> OutboxRow | None:
            if route.service == AUTONOMOUS_SERVICE:  # the agent's own surface has no reader to deliver to
                return None
            outbound = Outbound(
                event_id=event_id,
                agent_id=agent_id,
                service=route.service,
                channel=route.channel,
                conversation_id=said_in.conversation_id,
                message_id=message.id,
                text=message.text,
            )
            return self._outbox.row(outbound, reply_key(event_id), message.created_at)

        said_in = setup
        if route.redirected:  # said in the private chat: recorded there, and the room gets a note
            said_in = await self._redirected(setup, agent.name, route.service, route.channel, now)
        prepared = draft.prepared if draft is not None else None
        evidence = [item.record_id for item in prepared.evidence_items()] if prepared is not None else []
        upkeep = ReplyUpkeep(
            trace=trace,
            spend=self._outreach.reply_entry(event_id, route.service, route.channel, text, now),
            cleared_flags=prepared.woven if prepared is not None else (),
            # The records recalled for the turn, surfaced by the reply: consolidation and the
            # next turns' transmits know them from here.
            updated_flags=(remember_recalled(said_in.conversation_id, evidence),) if evidence else (),
        )
        message = await pipeline.record_reply(
            self._store, agent.name, said_in, text, now, marker, outbox_row, upkeep
        )
        if made:
            self._markers.put(made[-1])
        return message

    async def _deliver(self, sending: _Transmission, route: _Route) -> None:
        """Through the outbox (the reply is stored, marked and in it: a failure here loses
        nothing); a reply that went elsewhere leaves a note where it was asked."""
        if route.service != AUTONOMOUS_SERVICE:
            try:
                await self._outbox.deliver(route.service, sending.setup.agent_id)
            except Exception as exc:
                log.warning("reply to %s not delivered on %s: %s", sending.event.id, route.service, exc)
        origin = sending.origin
        if route.target is not origin and origin is not None:
            await _safe_notice(
                origin, sending.event, Notice(level="info", text=route.reason or "answered elsewhere")
            )

    async def _redirected(
        self, setup: TurnSetup, agent_name: str, service: str, channel: str, now: datetime
    ) -> TurnSetup:
        """Where a redirected reply is recorded: the asker's conversation on the channel it
        goes to (so their next private message continues from it). The room's conversation
        gets a note of what the room saw — that the agent answered elsewhere, never the text,
        which was not said there. A replayed transmit finds the same open conversation, and
        the note's id derives from the event, so it is stored once."""
        private = await self._store.open_conversation(
            setup.agent_id,
            service,
            channel,
            [setup.person_id] if setup.person_id else [],
            now,
            self._settings.conversation.idle_timeout_minutes * 60,
        )
        note = Message(
            id=derived_id(setup.received_at, "redirect-note", setup.agent_id, setup.event_id),
            agent_id=setup.agent_id,
            conversation_id=setup.conversation_id,
            role=Role.SYSTEM,
            person_id=None,
            speaker_name=agent_name,
            text=f"({agent_name} answered {setup.speaker_name} privately, on {service}:{channel})",
            created_at=max(now, setup.received_at + timedelta(milliseconds=1)),
            event_id=None,  # not the event's input or reply: lookups by event never meet it
        )
        await self._store.add_message(note)
        return setup.model_copy(
            update={"conversation_id": private.id, "service": service, "channel": channel}
        )

    async def _may_redirect(self, event: Event, setup: TurnSetup, service: str, channel: str) -> bool:
        """Whether an answer may go to `service:channel` instead: only where no one reads it who
        was not in this conversation (the reply may repeat what was said here). That is the
        asker's own private channel on the same service (named by their speaker id or name, as
        IRC names a private chat and the agent link an agent), or a channel whose latest
        conversation had no one else in it (known only from the store's dialog history)."""
        speaker = event.speaker
        if (
            speaker is not None
            and service == event.service
            and channel.lower() in (speaker.speaker_id.lower(), speaker.display_name.lower())
        ):
            return True
        if self._history is None:
            return False
        present = set(setup.participant_ids or ()) | ({setup.person_id} if setup.person_id else set())
        there = [
            c
            for c in await self._history.list_conversations(setup.agent_id, channel=channel, limit=5)
            if c.service == service
        ]
        return bool(there) and set(there[0].participant_ids) <= present


@dataclass
class _Transmission:
    """One transmit's givens: the event, its setup and request, when it began (an unsent
    marker's time) and when the reply is said (later when pacing held it), and the surface the
    event came from."""

    event: Event
    setup: TurnSetup
    outcome: TransmitRequest
    began: datetime
    said_at: datetime
    ttl: timedelta
    origin: Channel | None


@dataclass(frozen=True)
class _Route:
    """Where a reply goes (`target` the connected channel of `service`), and the reason a reply
    went elsewhere than plainly back, or was a refusal in words."""

    target: Channel | None
    service: str
    channel: str
    reason: str | None = None
    redirected: bool = False


def _deliberation_trace(
    setup: TurnSetup, outcome: TransmitRequest, decision: deliberation.Decision | None
) -> dict[str, Any] | None:
    """What the turn deliberated, recorded with its outcome: the critiques, the tools used and
    any loop-breaker trips, and a decision a model made. None: there was nothing to record."""
    draft = outcome.draft
    critiques = [c.model_dump(mode="json") for c in outcome.critiques]
    used = [u.model_dump(mode="json") for u in draft.tools] if draft is not None else []
    trips = [t.model_dump(mode="json") for t in draft.trips] if draft is not None else []
    if not (critiques or used or (decision is not None and decision.reason != AUTO_SPEAK)):
        return None
    trace: dict[str, Any] = {"mode": setup.mode, "critiques": critiques}
    if used:
        trace["tools"] = used
    if trips:  # a loop breaker stopped the tool loop: recorded (SPEC §4.6)
        trace["trips"] = trips
    if decision is not None:
        trace["decision"] = decision.model_dump(mode="json")
    return trace


async def _safe_notice(channel: Channel | None, event: Event, notice: Notice) -> None:
    if channel is None:
        return
    with contextlib.suppress(Exception):
        await channel.notice(event, notice)
