"""Read-only views of an agent's stored history, for the CLI (no workers needed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import parse_id
from persyn.store import Store, open_store
from persyn.store.base import (
    ContactAddress,
    Conversation,
    Identity,
    Message,
    Observation,
    ObservationChange,
    Person,
    Role,
)
from persyn.store.capabilities import ContactsStore, capability, command_capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.memory import MemoryPort
from persyn.store.schema.tables import checked_address
from persyn.tools.builtin._contacts import named_contact

__all__ = [
    "PREFERRED_CHANNEL",
    "ChannelDigest",
    "Contact",
    "ContactDigest",
    "SharedStore",
    "Turn",
    "change_address",
    "change_identity",
    "channel",
    "channels",
    "contact",
    "contacts",
    "conversation_dialog",
    "list_conversations",
    "merge_contacts",
    "opened_capability",
    "opened_store",
    "person_observations",
    "prefer_channel",
    "recent_turns",
    "rename_contact",
]

_DIALOG_LIMIT = 100_000

P = TypeVar("P")


class SharedStore:
    """One store for a long-lived process's operator views (the web console): opened on first
    use, set up once, closed by `close` when the process stops. While `bound`, every
    `opened_store` of this task is this one store rather than a store opened, migrated and
    closed per call (the commands' logic in `ops/` stays the same for the CLI)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Store | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    async def get(self) -> Store:
        async with self._opening:
            if self._closed:
                raise InputError("the shared store is closed: this process is stopping")
            if self._store is None:
                store = open_store(self.settings.database_url)
                try:
                    await store.setup()
                except BaseException:
                    await store.close()
                    raise
                self._store = store
            return self._store

    @contextmanager
    def bound(self) -> Iterator[None]:
        token = _SHARED.set(self)
        try:
            yield
        finally:
            _SHARED.reset(token)

    async def close(self) -> None:
        async with self._opening:
            self._closed = True
            store, self._store = self._store, None
        if store is not None:
            await store.close()


_SHARED: ContextVar[SharedStore | None] = ContextVar("persyn_shared_store", default=None)


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    """The configured store for one command's work: the bound `SharedStore`'s when there is
    one for these settings (left open for its owner to close), else one opened here."""
    shared = _SHARED.get()
    if shared is not None and shared.settings.database_url == settings.database_url:
        yield await shared.get()
        return
    store = open_store(settings.database_url)
    await store.setup()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def opened_capability(settings: Settings, port: type[P]) -> AsyncIterator[P]:
    """The configured store as the capability `port`, for a command that needs it: InputError
    (exit 2) naming the capability when the store does not offer it."""
    async with opened_store(settings) as store:
        yield command_capability(store, port)


async def list_conversations(
    settings: Settings, agent: AgentConfig, channel: str | None, limit: int
) -> list[Conversation]:
    async with opened_capability(settings, DialogHistoryPort) as store:
        return await store.list_conversations(agent.id, channel=channel, limit=limit)


async def conversation_dialog(
    settings: Settings, agent: AgentConfig, conversation_id: str, *, deliberation: bool = False
) -> tuple[Conversation, list[Message], dict[str, dict[str, Any]]]:
    """A conversation, its dialog and, with `deliberation`, what deliberation did for each
    inbound message (critics' objections or why a critic was skipped, the decision)."""
    wanted = parse_id(conversation_id, what="conversation id")
    async with opened_store(settings) as store:
        conversation = await store.get_conversation(agent.id, wanted)
        if conversation is None:
            raise InputError(f"agent {agent.name} has no conversation {wanted!r}")
        messages = await store.recent_messages(agent.id, wanted, _DIALOG_LIMIT)
        traces: dict[str, dict[str, Any]] = {}
        if deliberation:
            inbound = [m.event_id for m in messages if m.event_id and m.role is not Role.AGENT]
            traces = {t.event_id: t.trace for t in await store.deliberation_traces(agent.id, inbound)}
    return conversation, messages, traces


class Turn(BaseModel):
    """One turn on a channel: what came in (None: only the reply is in the window read), what
    the agent said (None: it stayed silent) and what deliberation did (None: nothing recorded)."""

    event_id: str
    conversation_id: str
    at: datetime
    speaker: str
    asked: str | None = None
    said: str | None = None
    trace: dict[str, Any] | None = None


async def recent_turns(
    settings: Settings, agent: AgentConfig, service: str, channel: str, limit: int
) -> list[Turn]:
    """The `limit` latest turns on a channel, newest first, each with its deliberation trace.

    Read from the channel's last `2 * limit` messages (a turn is an input and at most one
    reply) and one trace lookup for the turns kept: the cost follows `limit`, never the
    channel's history."""
    if limit <= 0:
        return []
    async with opened_store(settings) as store:
        window = await store.channel_messages(agent.id, service, channel, 2 * limit)
        turns: dict[str, Turn] = {}
        for message in window:  # oldest first
            if message.event_id is None:
                continue
            turn = turns.get(message.event_id) or Turn(
                event_id=message.event_id,
                conversation_id=message.conversation_id,
                at=message.created_at,
                speaker=message.speaker_name,
            )
            if message.role is Role.AGENT:
                turn = turn.model_copy(update={"said": message.text})
            elif turn.asked is None:
                turn = turn.model_copy(update={"asked": message.text, "speaker": message.speaker_name})
            turns[message.event_id] = turn
        latest = list(turns.values())[::-1][:limit]
        found = await store.deliberation_traces(agent.id, [t.event_id for t in latest])
    traces = {t.event_id: t.trace for t in found}
    return [t.model_copy(update={"trace": traces.get(t.event_id)}) for t in latest]


# contacts (SPEC §4.5 directory browsing) ---------------------------------------------------
_DIGEST_CONVERSATIONS = 5
PREFERRED_CHANNEL = "preferred_channel"  # a per-person preference: "service:channel"
_DIGEST_SCAN = 300  # conversations looked through for the channel list and a channel digest


class Contact(BaseModel):
    """A directory entry: the person and the addresses they can be reached at."""

    person: Person
    addresses: list[ContactAddress] = []


class ContactDigest(BaseModel):
    """A contact as the directory shows it: who, where, and the few latest conversations."""

    person: Person
    addresses: list[ContactAddress] = []
    display_name_preference: str | None = None
    preferred_channel: str | None = None
    facts: dict[str, str] = {}
    conversations: list[tuple[Conversation, str | None]] = []  # with its summary, if consolidated


async def contacts(settings: Settings, agent: AgentConfig) -> list[Contact]:
    async with opened_capability(settings, ContactsStore) as store:
        people = await store.list_persons(agent.id)
        by_person: dict[str, list[ContactAddress]] = {}
        for address in await store.addresses(agent.id):
            by_person.setdefault(address.person_id, []).append(address)
    epoch = datetime.min.replace(tzinfo=UTC)
    people.sort(key=lambda p: p.last_interaction_at or p.created_at or epoch, reverse=True)
    return [Contact(person=p, addresses=by_person.get(p.id, [])) for p in people]


async def _summaries(
    memory: MemoryPort | None, agent: AgentConfig, conversations: list[Conversation]
) -> dict[str, str]:
    """The summaries of those of `conversations` that were consolidated (none without memory)."""
    if memory is None:
        return {}
    return await memory.conversation_summaries(agent.id, [c.id for c in conversations])


async def _person(store: ContactsStore, agent: AgentConfig, who: str) -> Person:
    """The contact a command names: an id, or a name exactly one contact goes by."""
    return await named_contact(store, agent.id, agent.name, who)


async def contact(settings: Settings, agent: AgentConfig, person_id: str) -> ContactDigest:
    """A bounded digest: a few recent conversations, found through the participant index
    (SPEC App. B), so its cost does not grow with how long the contact has been known."""
    async with opened_capability(settings, ContactsStore) as store:
        person = await _person(store, agent, person_id)
        preference = await store.get_preference(agent.id, person.id, "display_name")
        history = capability(store, DialogHistoryPort)  # without it: no conversations shown
        recent = (
            []
            if history is None
            else await history.person_conversations(agent.id, person.id, _DIGEST_CONVERSATIONS)
        )
        memory = capability(store, MemoryPort)  # without it: no summaries, no facts
        summaries = await _summaries(memory, agent, recent)
        return ContactDigest(
            person=person,
            addresses=await store.addresses(agent.id, person.id),
            display_name_preference=preference,
            preferred_channel=await store.get_preference(agent.id, person.id, PREFERRED_CHANNEL),
            facts={} if memory is None else await memory.facts(agent.id, person.id),
            conversations=[(c, summaries.get(c.id)) for c in recent],
        )


async def rename_contact(settings: Settings, agent: AgentConfig, person_id: str, name: str) -> Person:
    name = name.strip()
    if not name or len(name) > 64:
        raise InputError(f"invalid name {name!r}: use 1 to 64 characters")
    async with opened_capability(settings, ContactsStore) as store:
        person = await _person(store, agent, person_id)
        return await store.rename_person(agent.id, person.id, name)


async def merge_contacts(
    settings: Settings, agent: AgentConfig, survivor_id: str, other_id: str, name: str | None
) -> Person:
    """Fold `other` into `survivor` (retroactive; the operator picks the survivor and name)."""
    if name is not None and (not name.strip() or len(name.strip()) > 64):
        raise InputError(f"invalid name {name!r}: use 1 to 64 characters")
    async with opened_capability(settings, ContactsStore) as store:
        survivor = await _person(store, agent, survivor_id)
        other = await _person(store, agent, other_id)
        if survivor.id == other.id:
            raise InputError("a contact cannot be merged into itself")
        return await store.merge_persons(agent.id, survivor.id, other.id, name.strip() if name else None)


async def change_identity(
    settings: Settings, agent: AgentConfig, person_id: str, identity: Identity, *, attach: bool
) -> Person:
    async with opened_capability(settings, ContactsStore) as store:
        person = await _person(store, agent, person_id)
        if attach:
            return await store.attach_identity(agent.id, person.id, identity)
        return await store.detach_identity(agent.id, person.id, identity)


async def change_address(
    settings: Settings,
    agent: AgentConfig,
    person_id: str,
    label: str,
    value: str,
    *,
    add: bool,
    now: datetime,
) -> tuple[Person, bool]:
    """Give a contact an address, or take one away (SPEC §4.5 out-of-band curation). Returns
    the contact and whether anything changed (False: they already had it, when adding)."""
    label, value = checked_address(label, value)
    async with opened_capability(settings, ContactsStore) as store:
        person = await _person(store, agent, person_id)
        if add:
            return person, await store.add_address(agent.id, person.id, label, value, now)
        if not await store.remove_address(agent.id, person.id, label, value):
            raise InputError(
                f"contact {person.display_name} ({person.id}) has no {label} address {value!r} "
                f"(see `persyn contacts show {person.id}`)"
            )
        return person, True


async def prefer_channel(settings: Settings, agent: AgentConfig, person_id: str, channel: str) -> Person:
    """Where to reach this contact first ("service:channel"); the agent's outreach tool reads it."""
    service, _, name = channel.partition(":")
    if not service.strip() or not name.strip():
        raise InputError(f"invalid channel {channel!r}: use SERVICE:CHANNEL, e.g. terminal:terminal")
    async with opened_capability(settings, ContactsStore) as store:
        person = await _person(store, agent, person_id)
        await store.set_preference(
            agent.id, person.id, PREFERRED_CHANNEL, f"{service.strip()}:{name.strip()}"
        )
        return person


class ChannelDigest(BaseModel):
    service: str
    channel: str
    conversations: list[tuple[Conversation, str | None]] = []


async def channels(settings: Settings, agent: AgentConfig) -> list[ChannelDigest]:
    """The channels the agent has conversed on, most recently active first (bounded scan)."""
    async with opened_store(settings) as store:
        history = command_capability(store, DialogHistoryPort)
        seen: dict[tuple[str, str], ChannelDigest] = {}
        for conversation in await history.list_conversations(agent.id, limit=_DIGEST_SCAN):
            key = (conversation.service, conversation.channel)
            if key not in seen:
                seen[key] = ChannelDigest(service=key[0], channel=key[1])
        return list(seen.values())


async def channel(settings: Settings, agent: AgentConfig, name: str) -> ChannelDigest:
    """One channel ("service:channel") with its latest conversations' summaries, newest first."""
    service, _, channel_name = name.partition(":")
    async with opened_store(settings) as store:
        history = command_capability(store, DialogHistoryPort)
        recent = await history.list_conversations(agent.id, channel=channel_name, limit=_DIGEST_SCAN)
        recent = [c for c in recent if c.service == service][:_DIGEST_CONVERSATIONS]
        if not recent:
            raise InputError(
                f"agent {agent.name} has no conversations on {name!r} (see `persyn channels list`)"
            )
        summaries = await _summaries(capability(store, MemoryPort), agent, recent)
        return ChannelDigest(
            service=service, channel=channel_name, conversations=[(c, summaries.get(c.id)) for c in recent]
        )


async def person_observations(
    settings: Settings, agent: AgentConfig, person_id: str
) -> tuple[Person, list[Observation], list[ObservationChange], str | None]:
    """What the agent has observed about someone, how that changed, and its cached dossier."""
    from persyn.people.observations import DOSSIER_FLAG

    async with opened_capability(settings, ContactsStore) as store:
        person = await _person(store, agent, person_id)
        memory = command_capability(store, MemoryPort)
        observations = await memory.observations(agent.id, person.id)
        history = await memory.observation_history(agent.id, person.id)
        raw = await store.get_flag(agent.id, DOSSIER_FLAG + person.id)
    dossier: str | None = None
    if raw:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            dossier = str(json.loads(raw)["text"])
    return person, observations, history, dossier
