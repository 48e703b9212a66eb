"""Messaging a contact (SPEC §4.5 "initiate", §4.6): the agent reaches out on its own.

The contact is named by name or id. The channel is, in order:
1. the contact's preferred channel (the per-person preference `preferred_channel`,
   "service:channel", set by the operator);
2. else the channel of the most recently active conversation they took part in (from the
   participant index: the latest `_RECENT_CONVERSATIONS`, reflections excluded);
3. else the channel of their one identity, when every identity they have is on one channel;
   an identity that holds on a whole network (its channel is the service: `slack`, `discord`,
   `telegram`, `email`) names no conversation, so it is the person on that network
   (`direct_address`: the adapter opens a DM with them, or writes to the address itself,
   before anything is stored — `runtime.channel.Channel.direct_channel`);
4. else a refusal saying so.

Delivery itself belongs to the runtime: the context carries `send(person_id, service,
channel, text)`, which returns a delivery id or summary. Each activation may send at most
`max_messages` messages (an autonomous loop breaker, counted per attempt): past that the
tool refuses and says so in its result, which the trace records. The tools are rebuilt for
every call, so the count is `sent()` when the context has it — what the run has already sent,
from durable state (the runtime's `send` enforces the same cap there, atomically) — and is
kept in memory otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.clock import Clock
from persyn.core.errors import ToolError
from persyn.core.records import direct_address
from persyn.store.base import Person
from persyn.store.capabilities import ContactsStore, capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.tools.builtin._contacts import describe, resolve_contact
from persyn.tools.registry import Tool

__all__ = [
    "PREFERRED_CHANNEL",
    "MessageSent",
    "OutreachContext",
    "SendMessage",
    "outreach_tools",
]

# The preference key the operator sets (`persyn contacts prefer`, ops/history.py).
PREFERRED_CHANNEL = "preferred_channel"
_RECENT_CONVERSATIONS = 5

SendMessage = Callable[[str, str, str, str], Awaitable[str]]
"""send(person_id, service, channel, text) -> a delivery id or short summary."""

Route = Literal["preferred channel", "most recent conversation", "only identity"]


@dataclass(frozen=True)
class OutreachContext:
    store: ContactsStore
    agent_id: str
    clock: Clock
    send: SendMessage
    # At most this many messages per activation.
    max_messages: int = 3
    max_text_chars: int = 4000
    # How many messages this activation has already sent (durable); None: counted here.
    sent: Callable[[], Awaitable[int]] | None = None


class MessageContactInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=1, max_length=200, description="The contact's name or id.")
    text: str = Field(description="What to say, exactly as they should read it.")


class MessageSent(BaseModel):
    model_config = ConfigDict(frozen=True)

    person_id: str
    name: str
    service: str
    channel: str
    route: Route = Field(description="Why this channel was chosen.")
    delivery: str = Field(description="What the channel reported back.")
    sent_at: str
    remaining_this_turn: int = Field(description="How many more messages you may send now.")


def outreach_tools(context: OutreachContext) -> list[Tool[Any, Any]]:
    """message_contact, bound to `context` (and its per-activation message count)."""
    store, agent_id = context.store, context.agent_id
    # Where they were last met; a store without dialog history (`store/capabilities.py`)
    # leaves it to their preferred channel or only identity.
    history = capability(store, DialogHistoryPort)
    attempts = 0

    async def route(person: Person) -> tuple[str, str, Route]:
        preferred = await store.get_preference(agent_id, person.id, PREFERRED_CHANNEL)
        if preferred:
            service, _, channel = preferred.partition(":")
            if service.strip() and channel.strip():
                return service.strip(), channel.strip(), "preferred channel"
        met = (
            []
            if history is None
            else await history.person_conversations(agent_id, person.id, _RECENT_CONVERSATIONS)
        )
        recent = [c for c in met if c.kind == "dialog"]
        if recent:
            latest = max(recent, key=lambda c: (c.last_activity_at, c.id))
            return latest.service, latest.channel, "most recent conversation"
        places = {(i.service, i.channel) for i in person.identities}
        if len(places) == 1:
            ((service, channel),) = places
            if channel != service or len(person.identities) > 1:
                return service, channel, "only identity"  # the identity names its conversation
            # A network-wide identity: the person, for the adapter to find.
            return service, direct_address(next(iter(person.identities)).speaker_id), "only identity"
        why = "several identities and no conversation" if places else "no conversation and no identity"
        raise ToolError(
            f"no way to reach {describe(person)}: {why} to pick a channel from; the operator "
            "can set their preferred channel"
        )

    async def message(arguments: MessageContactInput) -> MessageSent:
        nonlocal attempts
        text = arguments.text.strip()
        if not text:
            raise ToolError("the message is empty: say something")
        if len(text) > context.max_text_chars:
            raise ToolError(
                f"the message is {len(text)} characters, over the limit of {context.max_text_chars}; "
                "shorten it"
            )
        if context.sent is not None:
            attempts = await context.sent()
        if attempts >= context.max_messages:
            raise ToolError(
                f"message cap reached: you have already sent {attempts} messages this turn (the "
                f"most allowed is {context.max_messages}); this one was not sent"
            )
        person = await resolve_contact(store, agent_id, arguments.to)
        service, channel, why = await route(person)
        attempts += 1
        try:
            delivery = await context.send(person.id, service, channel, text)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"could not deliver to {describe(person)} on {service}:{channel}: {exc}") from exc
        return MessageSent(
            person_id=person.id,
            name=person.display_name,
            service=service,
            channel=channel,
            route=why,
            delivery=delivery,
            sent_at=context.clock.now().isoformat(),
            remaining_this_turn=max(0, context.max_messages - attempts),
        )

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="message_contact",
            description=(
                "Send a message, on your own initiative, to someone you know (by name or id) — "
                "not to whoever you are talking with now: just reply to them. It goes to their "
                "preferred channel, else where you last talked. Only a few per turn."
            ),
            input_model=MessageContactInput,
            output_model=MessageSent,
            handler=message,
        ),
    ]
    return tools
