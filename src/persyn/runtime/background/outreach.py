"""What the agent initiates (SPEC §4.5) and the per-channel budgets that bound it and its
replies: `message_contact` (`send_to_contact`), the audience check of a self-initiated run,
the per-run message cap, the rolling 24-hour initiation and reply budgets.

The counters are in the store's runs sub-port (`store/ports/runs.py`), each updated in one
transaction and keyed so that a re-run durable step counts once: a send by its tool call (in
the run's state), a reply by its event (in the channel's ledger).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Protocol

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ToolError
from persyn.core.events import Event, EventKind, Outbound
from persyn.core.ids import new_id
from persyn.core.records import DIRECT_PREFIX, channel_key
from persyn.memory.access import may_surface
from persyn.runtime.background.autonomy import AUTONOMOUS_SERVICE, run_provenance
from persyn.runtime.background.guardrails import block_reason
from persyn.runtime.channel import Channel
from persyn.runtime.delivery.outbox import Outbox, send_key
from persyn.store import Store
from persyn.store.base import Message, Role
from persyn.store.ports.guardrails import GuardrailEvent
from persyn.store.ports.runs import ChannelEntry, RunState, SpendKind

__all__ = ["Outreach"]

log = logging.getLogger(__name__)

_WINDOW = timedelta(hours=24)


class TargetGate(Protocol):
    """The guardrails' hard gate for a message the agent initiates (`runtime.background.guardrails`)."""

    async def blocking_target(
        self, agent_id: str, person_id: str | None, service: str, channel: str
    ) -> GuardrailEvent | None: ...


class Outreach:
    """Sends and budgets, given the store, settings, clock, the agents, the outbox, how to
    read a run's event (`event_of`) and how to validate text entering the pipeline."""

    def __init__(
        self,
        *,
        store: Store,
        settings: Settings,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        outbox: Outbox,
        event_of: Callable[[str, str], Awaitable[Event]],
        validate_text: Callable[[str], str],
        connected: Callable[[str], bool],
        guardrails: TargetGate | None = None,
        channels: Callable[[str], Channel | None] | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._agents = agents
        self._outbox = outbox
        self._event_of = event_of
        self._validate_text = validate_text
        self._connected = connected
        self._guardrails = guardrails
        self._channels = channels

    async def send_to_contact(
        self,
        agent_id: str,
        event_id: str,
        person_id: str,
        service: str,
        channel: str,
        text: str,
        *,
        call_key: str | None = None,
    ) -> str:
        """The agent initiates: the message is stored as said by the agent in a conversation
        with the person on that channel, written to the outbox, and delivered there by
        whichever process connects that channel (at once if this one does). `call_key` is
        the tool call's (`Runtime.run_tool`): a send under a key already counted is the same
        call run again, and writes the same outbox row; without one, every send counts."""
        text = self._validate_text(text)
        if channel.startswith(DIRECT_PREFIX):
            channel = await self.direct_channel(agent_id, service, channel.removeprefix(DIRECT_PREFIX))
        now = self._clock.now()
        if self._guardrails is not None:  # SPEC §4.10: a block holds for what the agent starts too
            blocked = await self._guardrails.blocking_target(agent_id, person_id, service, channel)
            if blocked is not None:
                raise ToolError(f"not sent: {block_reason(blocked)}")
        await self.check_audience(agent_id, event_id, person_id, service, channel)
        await self.count_outreach(agent_id, event_id, call_key)
        await self.spend_channel_budget(agent_id, service, channel, text, now)
        conversation = await self._store.open_conversation(
            agent_id,
            service,
            channel,
            [person_id],
            now,
            self._settings.conversation.idle_timeout_minutes * 60,
        )
        message = Message(
            id=new_id(now),
            agent_id=agent_id,
            conversation_id=conversation.id,
            role=Role.AGENT,
            person_id=None,
            speaker_name=self._agents[agent_id].name,
            text=text,
            created_at=now,
            event_id=None,
        )
        await self._store.add_message(message)
        outbound = Outbound(
            event_id=event_id,
            agent_id=agent_id,
            service=service,
            channel=channel,
            conversation_id=conversation.id,
            message_id=message.id,
            text=text,
        )
        where = f"{service}:{channel}"
        try:
            delivered = await self._outbox.send(outbound, send_key(event_id, call_key, now), now)
        except Exception as exc:
            return f"stored, but {service} failed to deliver it: {exc}"
        if delivered:
            return f"delivered on {where}"
        if self._connected(service):
            return f"stored, but {service} failed to deliver it; it is retried"
        return (
            f"stored in my conversation with them on {where}; it is delivered when that channel "
            "connects (it is not connected here)"
        )

    async def direct_channel(self, agent_id: str, service: str, speaker_id: str) -> str:
        """Where to write to the person with `speaker_id` on `service`, asked of its adapter
        connected here (a DM opened, `Channel.direct_channel`) before anything is stored, so the
        message lives in the conversation their answer will be in. Not connected here, or
        refused by the network (a user who never started a Telegram bot): ToolError, nothing
        stored or counted."""
        adapter = None if self._channels is None else self._channels(service)
        if adapter is None or not adapter.serves(agent_id):
            raise ToolError(
                f"not sent: {service} is not connected here, so no conversation with them can be "
                "opened on it now; try later, or the operator can set their preferred channel"
            )
        try:
            found = await adapter.direct_channel(agent_id, speaker_id)
        except Exception as exc:
            raise ToolError(f"not sent: {service} would not open a conversation with them: {exc}") from exc
        if not found or found.startswith(DIRECT_PREFIX):
            raise ToolError(f"not sent: {service} gave no conversation to write to them in")
        return found

    async def check_audience(
        self, agent_id: str, event_id: str, person_id: str, service: str, channel: str
    ) -> None:
        """A self-initiated run (a beat, a reminder) tells someone only what may surface in
        front of them there: its provenance is the meet of everything it read
        (`autonomy.narrow_run`), so a beat that reviewed Ann's private memories may write to
        Ann on her channel, never to Bob. A conversation turn relays on behalf of the people
        present, who see what it read; it is not gated here."""
        event = await self._event_of(agent_id, event_id)
        if event.kind is EventKind.MESSAGE:
            return
        home = channel_key(event.service, event.channel)
        provenance = await run_provenance(self._store, agent_id, event_id, home)
        target = channel_key(service, channel)
        if not may_surface(
            provenance, target, (person_id,), self._settings.memory.channel_groups, agent_id=agent_id
        ):
            raise ToolError(
                f"not sent: this run read things that may not be told to this person on {target} "
                f"(they formed on {provenance.channel or 'no channel'}, {provenance.sensitivity.value}); "
                "write to someone they may reach, or leave it"
            )

    async def messages_sent(self, agent_id: str, event_id: str) -> int:
        """How many messages the run of `event_id` has sent to contacts: every send past the
        cap, including one the channel budget or the channel then refused."""
        state = await self._store.get_run(agent_id, event_id)
        return 0 if state is None else len(state.sends)

    async def count_outreach(self, agent_id: str, event_id: str, call_key: str | None) -> None:
        """`[autonomy] max_messages_per_run` over the whole run, atomically in the store (the
        tool registry is rebuilt for every call: a counter there restarted each time, and one
        turn sent 16 messages to 8 contacts). A send is keyed by the tool call that makes it,
        so a tool-call step re-run after a crash counts once and two calls count twice,
        whatever they say (a key of what is sent let texts differing only in spaces pass as
        re-runs: 48 messages under a cap of 2). Refused sends raise ToolError, which the
        model reads."""
        limit = self._settings.autonomy.max_messages_per_run
        key = call_key or new_id(self._clock.now())  # no durable step to re-run: a send of its own

        def count(state: RunState) -> RunState:
            if key in state.sends:
                return state  # this very call, again (a re-run step): already counted
            if len(state.sends) >= limit:
                raise ToolError(
                    f"message cap reached: you have already sent {len(state.sends)} messages this turn "
                    f"(the most allowed is {limit}); this one was not sent"
                )
            return state.model_copy(update={"sends": (*state.sends, key)})

        await self._store.update_run(agent_id, event_id, count, self._clock.now())

    async def spend_channel_budget(
        self, agent_id: str, service: str, channel: str, text: str, now: datetime
    ) -> None:
        """A rolling 24-hour budget of what the agent initiates per channel (SPEC §4.5): the
        first defence against an agent that keeps writing. Refused sends raise ToolError,
        which the model reads."""
        limit = self._settings.autonomy.channel_message_tokens
        cost = max(1, len(text) // 4)
        spend = await self._store.spend_channel(
            agent_id,
            SpendKind.SENT,
            service,
            channel,
            new_id(now),
            cost,
            now,
            since=now - _WINDOW,
            limit=limit,
        )
        if not spend.recorded:
            raise ToolError(
                f"not sent: I have initiated {spend.used} of my {limit} tokens on {service}:{channel} in the "
                "last 24 hours; this would exceed it. Wait, or say less."
            )

    async def reply_budget_spent(self, setup: TurnSetup) -> str | None:
        """Why the channel gets no generated reply now, or None: its rolling 24-hour budget of
        reply tokens (`[autonomy] channel_reply_tokens`, SPEC §4.5) is used — the primary
        defence against two agents talking forever. Self-initiated runs on the agent's own
        surface (no one reads it) have the autonomy budget instead."""
        if setup.service == AUTONOMOUS_SERVICE:
            return None
        limit = self._settings.autonomy.channel_reply_tokens
        since = self._clock.now() - _WINDOW
        used = await self._store.channel_spent(
            setup.agent_id, SpendKind.REPLIED, setup.service, setup.channel, since
        )
        if used < limit:
            return None
        reason = (
            f"no reply: the reply budget of {limit} tokens per 24 hours on {setup.service}:{setup.channel} "
            f"is used ({used}); replies resume as the window moves on"
        )
        log.warning("agent %s: %s", setup.agent_id, reason)  # the operator's notice
        return reason

    def reply_entry(
        self, event_id: str, service: str, channel: str, text: str, now: datetime
    ) -> ChannelEntry:
        """The entry a transmitted reply spends against its channel's reply budget, keyed by
        its event (a re-run transmit step counts it once); recorded with the reply
        (`ReplyUpkeep`)."""
        cost = max(1, len(text) // 4)
        return ChannelEntry(
            kind=SpendKind.REPLIED,
            service=service,
            channel=channel,
            key=event_id,
            tokens=cost,
            since=now - _WINDOW,
        )
