"""Guardrails (SPEC §4.10): patterns evaluated in the background over recent interaction
history, and the hard gate every transmission passes.

`Guardrails.evaluate` runs in the scheduler process (`Housekeeping.run`, every `[safety]
evaluate_seconds`). For each agent it reads the window of the longest pattern once (every
conversation), runs the deterministic rules over it and, for each person whose window spans
enough conversations and who said something since their last check, the pattern's classifier
(stage `guardrail`, within `[safety] daily_tokens`, checked before each call); `token_spend`
reads the usage ledger's recent tail (`usage.ledger.records_since`) by the channel each call
was made for. A match is recorded as a `GuardrailEvent` and acted on: `notify` writes a notice
to the operator's channel through the outbox, `block` silences replies to the person or channel
whose doing it was until the block ends, and to the agent everywhere only for what the agent did
of itself (its own spend, its failing tools): the operator's channels (`notify_channel`,
`persyn chat`, `persyn send`, an operator web key) are never a rule's subject and no channel or agent block reaches
them (they watch them, and would lift the block),
`end_conversation` closes the conversation (its close hooks run as for an idle close).

Several scheduler processes may share one store (`persyn serve` and a `persyn worker`, or two
workers on PostgreSQL). Each evaluation period (`evaluate_seconds`, counted from the epoch so
every process agrees on its bounds) is a slot: a process evaluates a pattern for an agent only
after it claimed that slot in the store (`claim_guardrail_slot`, a conditional insert), so a
classifier is called and a rule counted once per period whoever runs it. A trigger's id is
derived from the pattern, its subject and the slot, and it is acted on only by the process whose
insert stored it. A process killed after claiming a slot leaves that period unevaluated; the
next period evaluates the same window again.

`Guardrails.blocking` is the hard gate: transmit asks it on every transmission, inline or
deferred, and the draft step asks it before any model call, so a blocked person or channel gets
no reply (recorded as silence with the guardrail's reason) and costs nothing.

Without the store's guardrail history (`store/capabilities.py`) there is nothing to evaluate
into and no block to find: the guardrails are off (`persyn doctor` names the missing
capability). Without web keys no web channel is an operator's.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from persyn.cognition import guardrails as detect
from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, GuardrailConfig, Settings
from persyn.core.config.safety import CLASSIFIER, effective_guardrails
from persyn.core.events import Outbound
from persyn.core.ids import derived_id, new_id
from persyn.core.records import channel_key
from persyn.gateway.gateway import ModelGateway
from persyn.runtime.background.autonomy import AUTONOMOUS_SERVICE
from persyn.runtime.delivery.outbox import Outbox
from persyn.runtime.web_keys import WEB_SERVICE
from persyn.store.base import Conversation, Message, Role, Store
from persyn.store.capabilities import capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.guardrails import GuardrailCheck, GuardrailEvent, GuardrailsPort, WindowMessage
from persyn.store.ports.web_keys import WebKeysPort
from persyn.usage import context as usage_context
from persyn.usage.ledger import records_since

__all__ = ["Guardrails", "block_reason"]

log = logging.getLogger(__name__)

_BUDGET_WINDOW = timedelta(hours=24)
_CHECK_RETENTION = timedelta(days=2)  # far past the budget window
_NOTICE_SPEAKER = "guardrail"
# The operator's surfaces besides `notify_channel`: `persyn chat` / the console (`terminal`,
# `channels/terminal/channel.py`) and `persyn send` (`cli`); only someone holding the home speaks there.
_OPERATOR_SERVICES = frozenset({"terminal", "cli"})
_HOLDER = f"{socket.gethostname()}:{os.getpid()}"[:200]  # who claimed a slot, for the operator


def block_reason(event: GuardrailEvent) -> str:
    """What a blocked reply is recorded with: the guardrail, its reason and the block's end."""
    until = f"{event.blocked_until:%Y-%m-%d %H:%M} UTC" if event.blocked_until else "further notice"
    return f"guardrail {event.guardrail!r} blocks replies here until {until} ({event.reason})"


class Guardrails:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        gateway: Callable[[str], ModelGateway],
        outbox: Outbox,
        conversation_closed: Callable[[Conversation], Awaitable[object]] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.history: GuardrailsPort | None = capability(store, GuardrailsPort)
        self._web_keys: WebKeysPort | None = capability(store, WebKeysPort)
        self._dialog: DialogHistoryPort | None = capability(store, DialogHistoryPort)  # to end one
        self.clock = clock
        self.agents = agents
        self._gateway = gateway
        self._outbox = outbox
        self._closed = conversation_closed
        self.patterns: tuple[GuardrailConfig, ...] = effective_guardrails(
            settings.safety, settings.guardrails
        )
        self._last_run: datetime | None = None

    # the hard gate ---------------------------------------------------------------------------
    async def blocking(self, setup: TurnSetup) -> GuardrailEvent | None:
        """The block in force on this turn's person, channel or agent, if any."""
        return await self.blocking_target(setup.agent_id, setup.person_id, setup.service, setup.channel)

    async def blocking_target(
        self, agent_id: str, person_id: str | None, service: str, channel: str
    ) -> GuardrailEvent | None:
        """The block in force on a person, a channel or the agent, if any: what a reply and
        a message the agent initiates (`Outreach.send_to_contact`) both pass."""
        if not self.settings.safety.enabled or self.history is None:
            return None
        where = channel_key(service, channel)
        for event in await self.history.guardrail_blocks(agent_id, self.clock.now()):
            if event.subject_kind == "person" and event.subject == person_id:
                return event
            if (
                event.subject_kind == "agent" or (event.subject_kind == "channel" and event.subject == where)
            ) and not await self.operators_channel(where):
                return event
        return None

    async def operators_channel(self, where: str) -> bool:
        """Whether `where` (`service:channel`) is the operator's: `[safety] notify_channel`,
        where the notices go; the surfaces only someone holding the deployment's home speaks
        on (`persyn chat` and the console, `persyn send`); an operator key's web channel. No
        block of a channel or of the agent reaches them: a block would silence the agent
        towards the one person who would lift it. A block of a person still does. (Read only
        when such a block is in force: the key lookup is no cost of an ordinary turn.)"""
        service, _, channel = where.partition(":")
        if where == self.settings.safety.notify_channel or service in _OPERATOR_SERVICES:
            return True
        if service != WEB_SERVICE or self._web_keys is None:
            return False
        return any(key.id == channel and key.operator for key in await self._web_keys.web_keys())

    async def blocked_reason(self, setup: TurnSetup) -> str | None:
        event = await self.blocking(setup)
        return None if event is None else block_reason(event)

    # evaluation ------------------------------------------------------------------------------
    def due(self) -> bool:
        every = timedelta(seconds=self.settings.safety.evaluate_seconds)
        return self._last_run is None or self.clock.now() - self._last_run >= every

    async def evaluate(self) -> list[GuardrailEvent]:
        """Evaluate every pattern for every agent once; returns the events recorded."""
        self._last_run = self.clock.now()
        history = self.history
        if not self.settings.safety.enabled or not self.patterns or history is None:
            return []
        recorded: list[GuardrailEvent] = []
        for agent_id in self.agents:
            recorded += await self._evaluate_agent(history, agent_id)
        await history.purge_guardrail_checks(self.clock.now() - _CHECK_RETENTION)
        return recorded

    def slot_start(self, now: datetime) -> datetime:
        """The start of the evaluation period `now` falls in (periods of `evaluate_seconds`
        from the epoch, so every process sharing the store agrees on them)."""
        every = self.settings.safety.evaluate_seconds
        return datetime.fromtimestamp(math.floor(now.timestamp() / every) * every, UTC)

    async def _evaluate_agent(self, history: GuardrailsPort, agent_id: str) -> list[GuardrailEvent]:
        now = self.clock.now()
        slot = self.slot_start(now)
        claimed = [
            p
            for p in self.patterns
            if await history.claim_guardrail_slot(agent_id, p.name, slot, _HOLDER, now)
        ]
        if not claimed:
            return []  # another process evaluates this period
        longest = max(p.window_minutes for p in claimed)
        window = await history.interaction_window(agent_id, now - timedelta(minutes=longest))
        recent = await history.guardrail_events(agent_id, since=now - timedelta(minutes=longest))
        blocked = {(e.guardrail, e.subject) for e in recent if e.blocks_at(now)}
        recorded: list[GuardrailEvent] = []
        for pattern in claimed:
            start = now - timedelta(minutes=pattern.window_minutes)
            in_window = [m for m in window if m.created_at >= start]
            try:
                findings = await self._detect(history, agent_id, pattern, in_window, blocked)
            except Exception as exc:  # one broken pattern never stops the others
                log.warning("guardrail %s failed for agent %s: %s", pattern.name, agent_id, exc)
                continue
            for finding in findings:
                if finding.subject_kind == "channel" and await self.operators_channel(finding.subject):
                    # The operator's own channel: they watch it, and notices go there, so a block
                    # would silence the agent towards the one person who would lift it.
                    continue
                if _already_acted(finding, pattern, recent, start, now):
                    continue
                event = await self._act(history, agent_id, pattern, finding, now, slot)
                if event is None:
                    continue  # recorded (and acted on) by another process
                recent.append(event)
                recorded.append(event)
        return recorded

    async def _detect(
        self,
        history: GuardrailsPort,
        agent_id: str,
        pattern: GuardrailConfig,
        window: list[WindowMessage],
        blocked: set[tuple[str, str]],
    ) -> list[detect.Finding]:
        if pattern.detector == "outbound_messages":
            return detect.outbound_spikes(pattern, window)
        if pattern.detector == "repeated_replies":
            return detect.repeated_replies(pattern, window)
        if pattern.detector == "tool_failures":
            return await self._tool_failures(agent_id, pattern, window)
        if pattern.detector == "token_spend":
            return detect.token_spend(pattern, await self._tokens_spent(agent_id, pattern))
        if pattern.detector == CLASSIFIER:
            return await self._classify(history, agent_id, pattern, window, blocked)
        raise AssertionError(f"unknown detector {pattern.detector!r}")  # pragma: no cover

    async def _tokens_spent(self, agent_id: str, pattern: GuardrailConfig) -> dict[str | None, int]:
        """The agent's metered tokens within the pattern's window, from the usage ledger (every
        process writes it; none when `[metering] event_log` is off), by the channel they were
        spent for; None holds the agent's own: its autonomous runs (`self`) and calls that no
        channel is attributed."""
        since = self.clock.now() - timedelta(minutes=pattern.window_minutes)
        records = await asyncio.to_thread(records_since, self.settings.usage_log_path, since)
        spent: dict[str | None, int] = {}
        for record in records:
            if record.agent_id != agent_id:
                continue
            own = record.surface is None or record.surface == AUTONOMOUS_SERVICE
            key = None if own else channel_key(record.surface or "", record.channel or "")
            spent[key] = spent.get(key, 0) + record.input_tokens + record.output_tokens
        return spent

    async def _tool_failures(
        self, agent_id: str, pattern: GuardrailConfig, window: list[WindowMessage]
    ) -> list[detect.Finding]:
        event_ids = sorted({m.event_id for m in window if m.event_id is not None})
        if not event_ids:
            return []
        statuses: list[str] = []
        trips = 0
        for trace in await self.store.deliberation_traces(agent_id, event_ids):
            for used in trace.trace.get("tools") or ():
                if isinstance(used, Mapping):
                    statuses.append(str(used.get("status", "")))  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
            trips += len(trace.trace.get("trips") or ())
        return detect.tool_failures(pattern, statuses, trips, window[-1].created_at)

    async def _classify(
        self,
        history: GuardrailsPort,
        agent_id: str,
        pattern: GuardrailConfig,
        window: list[WindowMessage],
        blocked: set[tuple[str, str]],
    ) -> list[detect.Finding]:
        safety = self.settings.safety
        agent = self.agents[agent_id]
        if "{rules}" in (pattern.question or "") and not agent.rules:
            return []  # nothing is prohibited by rules that do not exist: no call
        findings: list[detect.Finding] = []
        people = detect.person_windows(
            window, min_conversations=pattern.min_conversations, max_messages=safety.max_window_messages
        )
        for person in people:
            if (pattern.name, person.person_id) in blocked:
                continue  # already blocked by this pattern: no call until the block ends
            last = await history.last_guardrail_check(agent_id, pattern.name, person.person_id)
            if last is not None and last.window_end >= person.latest.created_at:
                continue  # nothing new from them since their last check
            now = self.clock.now()
            spent = await history.guardrail_tokens(agent_id, now - _BUDGET_WINDOW)
            if spent >= safety.daily_tokens:  # checked before each call
                log.info(
                    "guardrail budget of agent %s is spent (%d tokens); classifiers wait", agent_id, spent
                )
                break
            latest = person.latest
            with usage_context.bind(
                usage_context.Attribution(
                    agent_id=agent_id,
                    surface=latest.service,
                    channel=latest.channel,
                    conversation_id=latest.conversation_id,
                    trigger="guardrails",
                )
            ):
                verdict, usage, error = await detect.judge(self._gateway(agent_id), pattern, agent, person)
            await history.add_guardrail_check(
                GuardrailCheck(
                    id=new_id(now),
                    agent_id=agent_id,
                    guardrail=pattern.name,
                    # A failed call leaves the watermark where it was: judged again next time.
                    subject=person.person_id,
                    window_end=latest.created_at
                    if verdict is not None
                    else person.messages[0].created_at - timedelta(microseconds=1),
                    checked_at=now,
                    tokens=usage.input_tokens + usage.output_tokens,
                )
            )
            if verdict is None:
                log.warning("guardrail %s could not judge %s: %s", pattern.name, person.person_id, error)
                continue
            if verdict.score >= pattern.threshold:
                findings.append(
                    detect.Finding(
                        guardrail=pattern.name,
                        subject_kind="person",
                        subject=person.person_id,
                        score=verdict.score,
                        reason=f"{person.name}: {verdict.reason}",
                        person_id=person.person_id,
                        service=latest.service,
                        channel=latest.channel,
                        conversation_id=latest.conversation_id,
                    )
                )
        return findings

    # actions ---------------------------------------------------------------------------------
    async def _act(
        self,
        history: GuardrailsPort,
        agent_id: str,
        pattern: GuardrailConfig,
        finding: detect.Finding,
        now: datetime,
        slot: datetime,
    ) -> GuardrailEvent | None:
        """Record the trigger and act on it; None when its event was already stored (its id
        is derived from the pattern, the subject and the slot): whoever stored it acts."""
        blocked_until = now + timedelta(minutes=pattern.block_minutes) if "block" in pattern.actions else None
        event = GuardrailEvent(
            id=derived_id(
                slot, agent_id, pattern.name, finding.subject_kind, finding.subject, slot.isoformat()
            ),
            agent_id=agent_id,
            guardrail=pattern.name,
            subject_kind=finding.subject_kind,
            subject=finding.subject,
            person_id=finding.person_id,
            service=finding.service,
            channel=finding.channel,
            conversation_id=finding.conversation_id,
            reason=finding.reason[:2000],
            score=finding.score,
            actions=tuple(pattern.actions),
            detected_at=now,
            blocked_until=blocked_until,
        )
        if not await history.add_guardrail_event(event):
            return None
        log.warning("guardrail %s triggered for agent %s: %s", pattern.name, agent_id, event.reason)
        if "end_conversation" in pattern.actions and finding.conversation_id is not None and self._dialog:
            closed = await self._dialog.close_conversation(agent_id, finding.conversation_id, now)
            if closed is not None and self._closed is not None:
                await self._closed(closed)
        if "notify" in pattern.actions:
            try:
                await self._notify(agent_id, event)
            except Exception as exc:  # recorded all the same; `persyn doctor` shows the block
                log.warning("guardrail notice for %s not written: %s", event.id, exc)
        return event

    async def _notify(self, agent_id: str, event: GuardrailEvent) -> None:
        """A notice in the operator's channel (`[safety] notify_channel`), through the outbox:
        delivered at once when that channel is connected here, else when it connects."""
        service, _, channel = self.settings.safety.notify_channel.partition(":")
        now = event.detected_at
        conversation = await self.store.open_conversation(
            agent_id, service, channel, [], now, self.settings.conversation.idle_timeout_minutes * 60
        )
        text = _notice_text(event)
        message = Message(
            id=derived_id(now, event.id, "notice"),
            agent_id=agent_id,
            conversation_id=conversation.id,
            role=Role.SYSTEM,
            person_id=None,
            speaker_name=_NOTICE_SPEAKER,
            text=text,
            created_at=now,
            event_id=None,
        )
        await self.store.add_message(message)
        outbound = Outbound(
            event_id=event.id,
            agent_id=agent_id,
            service=service,
            channel=channel,
            conversation_id=conversation.id,
            message_id=message.id,
            text=text,
        )
        await self._outbox.send(outbound, derived_id(now, event.id, "outbox"), now)


def _notice_text(event: GuardrailEvent) -> str:
    where = {
        "person": f"a person on {event.service}:{event.channel}",
        "channel": event.subject,
        "agent": "the agent itself",
    }[event.subject_kind]
    done = ["recorded"]
    if event.blocked_until is not None:
        done.append(f"replies blocked until {event.blocked_until:%Y-%m-%d %H:%M} UTC")
    if "end_conversation" in event.actions:
        done.append("conversation ended")
    return (
        f"Guardrail {event.guardrail!r} triggered ({where}): {event.reason}. "
        f"{'; '.join(done)}. See `persyn guardrails events` (event {event.id})."
    )


def _already_acted(
    finding: detect.Finding,
    pattern: GuardrailConfig,
    recent: Sequence[GuardrailEvent],
    start: datetime,
    now: datetime,
) -> bool:
    """Whether this finding was already acted on: a block of it is in force, or (for a rule,
    which sees the same spike on every evaluation) it triggered within the current window."""
    for event in recent:
        if event.guardrail != pattern.name or event.subject != finding.subject:
            continue
        if event.blocks_at(now):
            return True
        if pattern.detector != CLASSIFIER and event.detected_at >= start:
            return True
    return False
