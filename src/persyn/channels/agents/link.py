"""Agents of one deployment talking directly (SPEC §4.5), with no network in between.

The `agent` service: an agent's words to another agent of the deployment — a reply, or a
`message_contact` — are an outbox row for service `agent`, channel the other agent's id. This
channel delivers such a row as an inbound event of the other agent, from the sender, on the
channel named by the sender's id. So agent-to-agent conversation runs through the same
pipeline, memory, budgets and pacing as any other.

An agent's words are cut to `[conversation] max_message_chars` (marked `[…]`) and stripped
of NUL characters on the way: the other agent's intake refuses them otherwise, and a refused
row would block the link (`receivable`).

Exactly once per row: the event id derives from the outbox row's id and time, so a row
delivered again (after a crash, by a racing process) is the same event, which the store and
the queue deduplicate.

Each agent knows the others from the start: `start` makes every other agent of the
deployment a contact of kind `agent` with the identity (`agent`, their id, their id) — the
key an event from them resolves by — so `message_contact` can reach one before they ever
spoke.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from contextvars import Context

from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError
from persyn.core.events import Event, Outbound, Speaker
from persyn.core.ids import derived_id
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Channel

__all__ = ["AGENT_SERVICE", "AgentLink"]

log = logging.getLogger(__name__)

AGENT_SERVICE = "agent"


def agent_speaker(agent: AgentConfig) -> Speaker:
    """How `agent` is known to the others: the lookup key of its identity, kind `agent`."""
    return Speaker(
        service=AGENT_SERVICE, channel=agent.id, speaker_id=agent.id, display_name=agent.name, kind="agent"
    )


def receivable(text: str, limit: int) -> str | None:
    """`text` as the other agent's intake accepts it (`core.messages.validate_message_text`):
    without NUL characters, cut to `limit` characters with a visible mark; None when nothing
    is left. The intake refusing a row would fail its delivery on every retry, and the outbox,
    which delivers in order, would hold every later message behind it."""
    text = text.replace("\x00", "")
    if not text.strip():
        return None
    if len(text) > limit:
        text = text[: max(0, limit - len(_CUT))].rstrip() + _CUT
    return text


_CUT = " […]"


class AgentLink(Channel):
    """The `agent` service of a deployment with more than one agent."""

    service = AGENT_SERVICE

    def __init__(
        self, agents: Mapping[str, AgentConfig], api: RuntimeAPI, *, max_message_chars: int = 32_000
    ) -> None:
        self._agents = dict(agents)
        self._api = api
        self._max_chars = max_message_chars

    async def start(self) -> None:
        for agent_id in self._agents:
            for other in self._agents.values():
                if other.id != agent_id:
                    await self._api.resolve_speaker(agent_id, agent_speaker(other))
        await self._api.attach_channel(self)

    async def stop(self) -> None:
        self._api.detach_channel(self)

    async def deliver(self, outbound: Outbound) -> None:
        sender = self._agents.get(outbound.agent_id)
        if sender is None or outbound.channel not in self._agents or outbound.channel == sender.id:
            raise ChannelError(f"no agent {outbound.channel!r} to deliver to from {outbound.agent_id!r}")
        text = receivable(outbound.text, self._max_chars)
        if text is None:  # nothing the other agent could read: delivered as nothing, not retried
            log.warning("agent link: nothing to deliver from %s to %s", sender.name, outbound.channel)
            return
        at = outbound.sent_at or self._api.clock.now()
        key = outbound.outbox_id or outbound.message_id
        event = Event(
            id=derived_id(at, "agent-link", key),
            agent_id=outbound.channel,
            service=AGENT_SERVICE,
            channel=sender.id,
            speaker=agent_speaker(sender),
            text=text,
            received_at=at,
            addressed=True,
        )
        # Delivered from inside the sender's durable transmit step: the other agent's event is
        # submitted in a context of its own, as any channel's inbound message is (a step may
        # not start workflows itself); the derived event id keeps it exactly-once.
        submitting = asyncio.get_running_loop().create_task(self._api.submit(event), context=Context())
        await submitting
