"""The storage port (ARCHITECTURE §4). One schema, several backends; every backend passes
`tests/contract/`. Every row carries `agent_id`; every id is a ULID.

Methods are async: backends run blocking database work off the event loop, with a single
writer on SQLite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.events import CompletionMarker, Event
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.graph_rows import (
    EntityFact,
    FactSource,
    GraphEntity,
    GraphRelation,
    GraphView,
    GraphWrite,
    RelationFact,
    Subgraph,
)
from persyn.store.outbox import OutboxStore

__all__ = [
    "GLOBAL",
    "AgentRow",
    "AtTrigger",
    "ContactAddress",
    "Conversation",
    "CronTrigger",
    "FireResult",
    "Goal",
    "GoalStatus",
    "Identity",
    "ImportedMemory",
    "IntervalTrigger",
    "Message",
    "Observation",
    "ObservationChange",
    "Person",
    "Provenance",
    "QuickFact",
    "Reminder",
    "ReminderAction",
    "ReminderStatus",
    "Role",
    "Store",
    "Trigger",
]


class Role(StrEnum):
    USER = "user"  # someone else speaking (a person, another agent)
    AGENT = "agent"  # this agent speaking
    SYSTEM = "system"  # reminders, heartbeat objectives, notices folded into dialog


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class AgentRow(_Row):
    id: str
    name: str
    created_at: datetime


class Identity(_Row):
    """Lookup key of a person on one surface (SPEC §4.4)."""

    service: str
    channel: str
    speaker_id: str


class Person(_Row):
    id: str
    agent_id: str
    display_name: str
    kind: str  # "human" | "agent"
    created_at: datetime
    last_interaction_at: datetime | None
    identities: tuple[Identity, ...] = ()


class ContactAddress(_Row):
    """A way to reach a person (SPEC §4.5) beside the identities they wrote from: an email
    address, a phone number, a Matrix id, under a short type label."""

    person_id: str
    label: str  # a lower-case token: "email", "phone", "matrix", "work", ...
    value: str
    created_at: datetime


class Observation(_Row):
    """A specific fact about a person (SPEC §4.4), from the conversation it was learned in."""

    id: str
    agent_id: str
    subject_id: str
    kind: str  # a type label, e.g. "occupation", "preference", "relationship"
    value: str
    observed_at: datetime
    conversation_id: str | None = None


class ObservationChange(_Row):
    """One entry of the audit trail: what changed about an observation, and why."""

    id: str
    subject_id: str
    observation_id: str
    action: str  # added | superseded | contradicted | supplemented
    before: str | None
    after: str | None
    reason: str
    at: datetime


class Conversation(_Row):
    id: str
    agent_id: str
    service: str
    channel: str
    participant_ids: tuple[str, ...]
    started_at: datetime
    last_activity_at: datetime
    closed_at: datetime | None
    kind: str = "dialog"  # "dialog" | "reflection"


class Message(_Row):
    id: str
    agent_id: str
    conversation_id: str
    role: Role
    person_id: str | None  # None for the agent itself
    speaker_name: str
    text: str
    created_at: datetime
    event_id: str | None


# reminders and goals (SPEC §4.7, §4.8) -------------------------------------------------------
# The trigger math (cron, intervals, rolling forward) lives in `persyn.schedule.triggers`;
# the store keeps triggers as data and never interprets them.


class AtTrigger(_Row):
    """Fire once, at `at` (UTC)."""

    kind: Literal["at"] = "at"
    at: datetime


class CronTrigger(_Row):
    """Fire at every match of a five-field cron expression, evaluated in UTC."""

    kind: Literal["cron"] = "cron"
    expression: str = Field(min_length=1, max_length=200)


class IntervalTrigger(_Row):
    """Fire at `start`, then every `every_seconds` after it."""

    kind: Literal["interval"] = "interval"
    every_seconds: int = Field(ge=1)
    start: datetime


Trigger = Annotated[AtTrigger | CronTrigger | IntervalTrigger, Field(discriminator="kind")]


class Provenance(_Row):
    """Where something the agent can repeat formed (ARCHITECTURE §4, turn 2): the channel
    (`channel_key`; None: on no channel, the agent on its own), the people present (the agent
    itself excluded) and the sensitivity. `memory.access.may_surface` decides from it where the
    thing may be brought up again, exactly as for a memory record. `GLOBAL` — no channel,
    nobody present, public — is what the agent concluded alone from nothing it could not say
    to anyone: it surfaces everywhere."""

    channel: str | None = Field(default=None, max_length=700)
    participant_ids: tuple[str, ...] = ()
    sensitivity: Sensitivity = Sensitivity.PUBLIC

    @property
    def scope(self) -> str:
        """One string per distinct provenance (a key column: quick facts are kept per scope)."""
        people = ",".join(sorted(set(self.participant_ids)))
        return f"{self.sensitivity.value}|{self.channel or '*'}|{people}"


GLOBAL = Provenance()


class QuickFact(_Row):
    """One quick fact about a person or the agent itself, as kept in one scope: the same
    key may hold a different value in each provenance it was noted in."""

    subject_id: str
    key: str
    value: str
    updated_at: datetime
    provenance: Provenance = GLOBAL


class ReminderAction(_Row):
    """What a firing reminder does besides waking the agent with its objective: whom to
    address (a person of the directory) and where (a service and channel; unset: the
    person's preferred or most recently used channel, SPEC §4.5)."""

    person_id: str | None = None
    service: str | None = Field(default=None, max_length=200)
    channel: str | None = Field(default=None, max_length=500)


class ReminderStatus(StrEnum):
    ACTIVE = "active"
    CANCELLED = "cancelled"


class Reminder(_Row):
    """A row of the persistent schedule (SPEC §4.7). `kind` is "reminder" for the ones the
    agent sets itself, "heartbeat" for the core one the agent's tools never show."""

    id: str
    agent_id: str
    kind: str = "reminder"
    objective: str
    trigger: Trigger
    action: ReminderAction = ReminderAction()
    status: ReminderStatus = ReminderStatus.ACTIVE
    next_fire_at: datetime
    created_at: datetime
    updated_at: datetime
    last_fired_at: datetime | None = None
    fire_count: int = 0
    # Where it was set (its objective is repeated by list_reminders and by the run it wakes).
    provenance: Provenance = GLOBAL


class FireResult(StrEnum):
    """What `Store.mark_fired` did."""

    ROLLED_FORWARD = "rolled_forward"  # a recurring reminder now waits for its next time
    DELETED = "deleted"  # a one-shot reminder (or one with no next time) is gone
    STALE = "stale"  # nothing: already fired for that time, cancelled, edited or deleted


class GoalStatus(StrEnum):
    OPEN = "open"
    ACHIEVED = "achieved"
    ABANDONED = "abandoned"
    RETIRED = "retired"


class Goal(_Row):
    """A goal the agent set itself (SPEC §4.8); `outcome` says how a closed one ended."""

    id: str
    agent_id: str
    description: str
    status: GoalStatus = GoalStatus.OPEN
    created_at: datetime
    updated_at: datetime
    outcome: str | None = None
    # Where it formed: open goals are standing context only where they may surface.
    provenance: Provenance = GLOBAL


@dataclass(frozen=True)
class ImportedMemory:
    """One line of imported history as `Store.add_imported` writes it: the record (and its
    vector) and, when the line had dialog, its conversation — already closed — with its
    messages and the flags that say what is already done with it."""

    record: MemoryRecord
    vector: Sequence[float] | None = None
    conversation: Conversation | None = None
    messages: Sequence[Message] = ()
    flags: Sequence[tuple[str, str]] = ()


class Store(OutboxStore, ABC):
    """What the rest of Persyn may ask of storage."""

    # lifecycle -----------------------------------------------------------------------
    @abstractmethod
    async def setup(self) -> None:
        """Create or migrate the schema. Idempotent; safe from several processes."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def schema_version(self) -> int: ...

    # agents --------------------------------------------------------------------------
    @abstractmethod
    async def ensure_agent(self, agent_id: str, name: str, now: datetime) -> AgentRow: ...

    @abstractmethod
    async def list_agents(self) -> list[AgentRow]: ...

    # events and completion markers ---------------------------------------------------
    @abstractmethod
    async def save_event(self, event: Event) -> bool:
        """Persist an inbound event. Returns False (and changes nothing) if its id exists."""

    @abstractmethod
    async def get_event(self, agent_id: str, event_id: str) -> Event | None: ...

    @abstractmethod
    async def put_marker(self, agent_id: str, marker: CompletionMarker) -> None:
        """Record how an event's run ended; a second put for the same event replaces it."""

    @abstractmethod
    async def get_marker(self, agent_id: str, event_id: str, now: datetime) -> CompletionMarker | None:
        """The marker, or None if absent or expired at `now`."""

    @abstractmethod
    async def purge_markers(self, now: datetime) -> int:
        """Delete expired markers; return how many went."""

    # persons (minimal directory; the people issue extends it) -------------------------
    @abstractmethod
    async def resolve_person(
        self, agent_id: str, identity: Identity, display_name: str, kind: str, now: datetime
    ) -> Person:
        """The person holding `identity`, created on first contact. Updates last interaction."""

    @abstractmethod
    async def get_person(self, agent_id: str, person_id: str) -> Person | None: ...

    @abstractmethod
    async def list_persons(self, agent_id: str) -> list[Person]: ...

    @abstractmethod
    async def rename_person(self, agent_id: str, person_id: str, display_name: str) -> Person: ...

    @abstractmethod
    async def add_observation(self, observation: Observation, action: str, reason: str) -> None:
        """Store a new observation and its audit entry (`action`: added or supplemented)."""

    @abstractmethod
    async def revise_observation(
        self, agent_id: str, observation_id: str, value: str | None, action: str, reason: str, now: datetime
    ) -> None:
        """Change an observation's value, or delete it (value None), with an audit entry."""

    @abstractmethod
    async def observations(self, agent_id: str, subject_id: str) -> list[Observation]:
        """Every current observation about a subject, oldest first."""

    @abstractmethod
    async def observation_history(self, agent_id: str, subject_id: str) -> list[ObservationChange]:
        """The audit trail of a subject's observations, oldest first."""

    @abstractmethod
    async def set_fact(
        self,
        agent_id: str,
        subject_id: str,
        key: str,
        value: str | None,
        now: datetime,
        *,
        provenance: Provenance = GLOBAL,
    ) -> None:
        """Set (or, with None, forget) one quick fact about a person or the agent itself, in
        the scope of `provenance`: the same key in another scope is a different fact."""

    @abstractmethod
    async def facts(self, agent_id: str, subject_id: str) -> dict[str, str]:
        """Every quick fact about a subject, by key, whatever its provenance (the operator's
        view; the newest value of a key held in several scopes)."""

    @abstractmethod
    async def fact_rows(self, agent_id: str, subject_id: str) -> list[QuickFact]:
        """Every quick fact about a subject with its provenance, by key, newest first within one."""

    @abstractmethod
    async def attach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        """Add an identity to a person, under the lookup key channels resolve senders by.
        An identity that already names another person is an error (merge them instead)."""

    @abstractmethod
    async def detach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        """Remove an identity from a person, looking forward: history stays with the person,
        and the next message on that identity makes a new person (first contact)."""

    @abstractmethod
    async def merge_persons(
        self, agent_id: str, survivor_id: str, other_id: str, display_name: str | None = None
    ) -> Person:
        """Fold `other` into `survivor`, retroactively and in one transaction: identities,
        contact addresses, preferences and quick facts the survivor lacks, observations,
        messages, conversation participants and memory participant lists move to the
        survivor; `other` is deleted. Returns the survivor
        (renamed when `display_name` is given)."""

    @abstractmethod
    async def add_address(self, agent_id: str, person_id: str, label: str, value: str, now: datetime) -> bool:
        """Give a person a contact address (label and value as `schema.checked_address`
        accepts them: bad ones are an InputError). False, and nothing changes, when they
        already have it."""

    @abstractmethod
    async def remove_address(self, agent_id: str, person_id: str, label: str, value: str) -> bool:
        """Take a contact address away; False when the person had no such address."""

    @abstractmethod
    async def addresses(self, agent_id: str, person_id: str | None = None) -> list[ContactAddress]:
        """A person's contact addresses (None: everyone's), oldest first."""

    @abstractmethod
    async def get_preference(self, agent_id: str, person_id: str, key: str) -> str | None: ...

    @abstractmethod
    async def set_preference(self, agent_id: str, person_id: str, key: str, value: str) -> None: ...

    # conversations ---------------------------------------------------------------------
    @abstractmethod
    async def open_conversation(
        self,
        agent_id: str,
        service: str,
        channel: str,
        participant_ids: Sequence[str],
        now: datetime,
        idle_timeout_seconds: float,
        kind: str = "dialog",
    ) -> Conversation:
        """The open conversation on this channel, or a new one. A conversation idle longer
        than the timeout is closed first. New participants are added to an open one.
        Touches last activity."""

    @abstractmethod
    async def get_conversation(self, agent_id: str, conversation_id: str) -> Conversation | None: ...

    @abstractmethod
    async def list_conversations(
        self, agent_id: str, *, channel: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Newest first."""

    @abstractmethod
    async def person_conversations(self, agent_id: str, person_id: str, limit: int) -> list[Conversation]:
        """The `limit` latest conversations (by start, newest first) a person took part in,
        from the participant index: the cost grows with `limit`, not with their history."""

    @abstractmethod
    async def close_idle_conversations(
        self, agent_id: str | None, now: datetime, idle_timeout_seconds: float
    ) -> list[Conversation]:
        """Close every open conversation idle longer than the timeout; return those closed."""

    # dialog ------------------------------------------------------------------------------
    @abstractmethod
    async def close_conversation(
        self, agent_id: str, conversation_id: str, now: datetime
    ) -> Conversation | None:
        """Close one conversation now (a self-initiated run is one conversation); None if it
        does not exist or was already closed — so its close hooks are enqueued only once."""

    @abstractmethod
    async def add_message(self, message: Message) -> bool:
        """Store a message. Idempotent: a message whose (event_id, role) already exists for
        an AGENT reply, or whose id exists, is not stored twice; returns False then."""

    async def record_inbound(
        self,
        agent_id: str,
        speaker: tuple[Identity, str, str] | None,
        service: str,
        channel: str,
        now: datetime,
        idle_timeout_seconds: float,
        kind: str,
        make_message: Callable[[Person | None, Conversation], Message],
    ) -> tuple[Person | None, Conversation, Message]:
        """An inbound turn: resolve the speaker (identity, display name, kind) to a person,
        open the channel's conversation of `kind` with them in it, and add the message
        `make_message` builds from both. A backend may do it in one transaction; each part
        is idempotent as its own method is."""
        person = None
        if speaker is not None:
            identity, display_name, person_kind = speaker
            person = await self.resolve_person(agent_id, identity, display_name, person_kind, now)
        participants = [person.id] if person is not None else []
        conversation = await self.open_conversation(
            agent_id, service, channel, participants, now, idle_timeout_seconds, kind
        )
        message = make_message(person, conversation)
        await self.add_message(message)
        return person, conversation, message

    async def record_reply(self, message: Message, marker: Callable[[Message], CompletionMarker]) -> Message:
        """Add the agent's reply to an event (or find the one already stored for it) and put
        the completion marker `marker` makes from the stored reply. A backend may do it in
        one transaction."""
        stored = message
        if not await self.add_message(message) and message.event_id is not None:
            stored = await self.agent_reply_for_event(message.agent_id, message.event_id) or message
        await self.put_marker(message.agent_id, marker(stored))
        return stored

    @abstractmethod
    async def recent_messages(self, agent_id: str, conversation_id: str, limit: int) -> list[Message]:
        """The last `limit` messages of a conversation, oldest first."""

    @abstractmethod
    async def turn_messages(
        self, agent_id: str, conversation_id: str, input_message_id: str, limit: int
    ) -> list[Message]:
        """The dialog a turn reads: the last `limit` messages of its conversation, oldest
        first by (created_at, id), always including the turn's input `input_message_id` —
        however many messages were stored after it while it waited in the queue. Nothing
        of any other conversation (recent dialog is the current conversation only; earlier
        ones reach a prompt only as memories, through `memory.access`)."""

    @abstractmethod
    async def channel_messages(self, agent_id: str, service: str, channel: str, limit: int) -> list[Message]:
        """The last `limit` messages on a channel across conversations, oldest first.
        Never for a prompt: it crosses conversations (see `turn_messages`)."""

    @abstractmethod
    async def agent_reply_for_event(self, agent_id: str, event_id: str) -> Message | None: ...

    @abstractmethod
    async def search_messages(
        self,
        agent_id: str,
        query: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 20,
    ) -> list[Message]:
        """Full-text (FTS5 / tsvector) keyword search over dialog, best match first."""

    @abstractmethod
    async def count_messages(self, agent_id: str) -> int: ...

    @abstractmethod
    async def purge_dialog(self, agent_id: str, before: datetime) -> int:
        """Delete verbatim dialog older than `before` in conversations closed before it (the
        retention window of SPEC §4.1); memory records stay. Returns messages deleted."""

    # small durable key/value state (flags, cursors) ------------------------------------
    @abstractmethod
    async def get_flag(self, agent_id: str, key: str) -> str | None: ...

    @abstractmethod
    async def set_flag(self, agent_id: str, key: str, value: str | None) -> None:
        """None deletes the flag."""

    @abstractmethod
    async def flags_with_prefix(self, agent_id: str, prefix: str, limit: int = 100) -> dict[str, str]:
        """Flags whose key starts with `prefix`, in key order (at most `limit`)."""

    @abstractmethod
    async def set_flag_if_absent(self, agent_id: str, key: str, value: str) -> bool:
        """Compare-and-set: True if this call created the flag."""

    async def update_flag(
        self, agent_id: str, key: str, change: Callable[[str | None], str | None]
    ) -> str | None:
        """Set a flag to `change(its current value)` (None deletes it) and return the new
        value. A backend may read and write in one transaction, which also makes the change
        atomic against other writers; this default is a read, then a write."""
        value = change(await self.get_flag(agent_id, key))
        await self.set_flag(agent_id, key, value)
        return value

    # long-term memory (SPEC §4.1, §5, §6 vector index + full text) --------------------------
    @abstractmethod
    async def add_record(
        self, record: MemoryRecord, vector: Sequence[float] | None, embedding_model: str | None
    ) -> bool:
        """Store a record (and its vector, if the encoder was available). Returns False and
        changes nothing when a record with the same id, or the same non-null `ref` for this
        agent, exists (re-importing history never duplicates)."""

    @abstractmethod
    async def add_records(
        self,
        records: Sequence[MemoryRecord],
        vectors: Sequence[Sequence[float] | None] | None,
        embedding_model: str | None,
    ) -> list[bool]:
        """Bulk `add_record` (imports, benchmarks): `vectors[i]` belongs to `records[i]`
        (None: no vector; `vectors=None`: none at all), every vector from `embedding_model`.
        Returns, per record, whether it was stored — as calling `add_record` for each in
        order would: a record whose id or ref exists, or came earlier in the batch, is
        skipped. One transaction: bad input anywhere (InputError) stores nothing."""

    @abstractmethod
    async def add_imported(self, items: Sequence[ImportedMemory], embedding_model: str | None) -> list[bool]:
        """A batch of imported history in one transaction: each item's conversation (with
        its given id, as given: closed), its participant index, messages and flags, then
        the records as `add_records` stores them. A kill leaves all of a batch or none of
        it. Idempotent: existing conversations, messages and flags are kept as they are, so
        a re-run completes what an earlier run left out. Returns, per item, whether its
        record was stored."""

    @abstractmethod
    async def link_record_messages(self, agent_id: str, record_id: str, message_ids: Sequence[str]) -> bool:
        """Set a record's `message_ids` (repairing an import an older version left without
        its links). False if there is no such record."""

    @abstractmethod
    async def get_record(self, agent_id: str, record_id: str) -> MemoryRecord | None: ...

    @abstractmethod
    async def get_record_by_ref(self, agent_id: str, ref: str) -> MemoryRecord | None: ...

    @abstractmethod
    async def records_by_ids(self, agent_id: str, record_ids: Sequence[str]) -> list[MemoryRecord]:
        """The records that exist among `record_ids` (any order)."""

    @abstractmethod
    async def list_records(
        self, agent_id: str, *, limit: int = 50, before_id: str | None = None
    ) -> list[MemoryRecord]:
        """Newest first; `before_id` pages backwards."""

    @abstractmethod
    async def delete_records(self, agent_id: str, record_ids: Sequence[str]) -> int:
        """Delete records (and their vectors and index entries); return how many went."""

    @abstractmethod
    async def count_records(self, agent_id: str) -> int: ...

    @abstractmethod
    async def record_stats(self, agent_id: str) -> dict[str, object]:
        """Counts by channel, sensitivity and importance; oldest/newest; vectors by model."""

    @abstractmethod
    async def vector_candidates(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """Nearest records by cosine distance (smaller is closer), filtered by agent and,
        when given, by channel key. Only vectors of `len(vector)` dimensions are searched.
        Returns (record_id, distance), closest first. A backend may answer approximately
        (an ANN index); the embedded SQLite one is exact, one partition per channel."""

    @abstractmethod
    async def keyword_candidates(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """Full-text matches over record summaries and tags: (record_id, bm25 score) with
        higher = better, best first. Any words match (OR), ranked by BM25; FTS syntax in the
        query is treated as plain words."""

    @abstractmethod
    async def set_record_vector(
        self, agent_id: str, record_id: str, vector: Sequence[float], embedding_model: str
    ) -> None:
        """Replace a record's vector (reindex after a model change)."""

    @abstractmethod
    async def records_needing_vectors(
        self, agent_id: str, embedding_model: str, limit: int
    ) -> list[MemoryRecord]:
        """Records with no vector from `embedding_model` (missing, or from another model)."""

    @abstractmethod
    async def cull_candidates(
        self, agent_id: str, *, below_importance: int, older_than: datetime
    ) -> list[MemoryRecord]:
        """Records rated below the threshold AND formed before `older_than` (SPEC §4.1)."""

    @abstractmethod
    async def conversation_summaries(self, agent_id: str, conversation_ids: Sequence[str]) -> dict[str, str]:
        """The summary of each conversation among `conversation_ids` that has been
        consolidated into a memory (the newest such record's), by conversation id."""

    @abstractmethod
    async def replace_participant(self, agent_id: str, old_person_id: str, new_person_id: str) -> int:
        """Re-attribute records' participant lists (directory merges); returns records changed."""

    # the knowledge graph (SPEC §4.3; types in graph_rows.py) -------------------------------
    @abstractmethod
    async def upsert_graph(
        self,
        agent_id: str,
        source: FactSource,
        entities: Sequence[EntityFact],
        relations: Sequence[RelationFact],
    ) -> GraphWrite:
        """Store what was learned, in one transaction, without duplicates: an entity is found
        by its normalised name (`entity_key`); a mention or relation learned again with the
        same provenance (channel, sensitivity, people present) is refreshed, not repeated.
        The endpoints of a relation get mentions with the same provenance, so a visible
        relation never points at an invisible entity. Bad names are an InputError and
        nothing is stored."""

    @abstractmethod
    async def graph_entities(
        self, agent_id: str, keys: Sequence[str], view: GraphView | None
    ) -> list[GraphEntity]:
        """Entities whose normalised name is one of `keys` and that are visible in `view`,
        with the attributes learned where they are visible."""

    @abstractmethod
    async def search_entities(
        self, agent_id: str, fragment: str, view: GraphView | None, limit: int = 20
    ) -> list[GraphEntity]:
        """Visible entities whose normalised name contains `fragment`, shortest name first."""

    @abstractmethod
    async def graph_neighbourhood(
        self,
        agent_id: str,
        entity_ids: Sequence[str],
        hops: int,
        view: GraphView | None,
        limit: int = 50,
    ) -> Subgraph:
        """Everything within `hops` visible relations of `entity_ids` (a recursive query over
        visible relations only: a hidden relation is never a bridge), nearest first; at most
        `limit` relations."""

    @abstractmethod
    async def graph_path(
        self, agent_id: str, source_id: str, target_id: str, view: GraphView | None, max_hops: int
    ) -> list[GraphRelation] | None:
        """A shortest chain of visible relations from one entity to another (either
        direction), or None when there is none within `max_hops`."""

    @abstractmethod
    async def graph_stats(self, agent_id: str) -> dict[str, int]:
        """Counts of entities, mentions and relations."""

    # reminders (SPEC §4.7) ------------------------------------------------------------------
    @abstractmethod
    async def add_reminder(self, reminder: Reminder) -> None:
        """Store a new reminder. An id that exists is a StoreError."""

    @abstractmethod
    async def get_reminder(self, agent_id: str, reminder_id: str) -> Reminder | None: ...

    @abstractmethod
    async def list_reminders(
        self,
        agent_id: str,
        *,
        kind: str | None = "reminder",
        include_cancelled: bool = False,
        limit: int = 100,
    ) -> list[Reminder]:
        """The agent's reminders of `kind` (None: every kind), soonest first."""

    @abstractmethod
    async def update_reminder(
        self,
        agent_id: str,
        reminder_id: str,
        now: datetime,
        *,
        objective: str | None = None,
        trigger: Trigger | None = None,
        next_fire_at: datetime | None = None,
        action: ReminderAction | None = None,
    ) -> Reminder:
        """Edit an active reminder; None leaves a field as it is. A new trigger needs the
        `next_fire_at` it gives (computed by `persyn.schedule`); a new `next_fire_at` alone
        reschedules. A missing reminder is a StoreError; a cancelled one an InputError."""

    @abstractmethod
    async def cancel_reminder(self, agent_id: str, reminder_id: str, now: datetime) -> Reminder:
        """Mark a reminder cancelled: it never fires again but stays listed with
        `include_cancelled`. Idempotent; a missing reminder is a StoreError."""

    @abstractmethod
    async def delete_reminder(self, agent_id: str, reminder_id: str) -> bool:
        """Remove a reminder entirely; False if there was none."""

    @abstractmethod
    async def due_reminders(
        self, now: datetime, *, agent_id: str | None = None, limit: int = 100
    ) -> list[Reminder]:
        """Active reminders whose next fire time is at or before `now` (of one agent, or of
        every agent), earliest first."""

    @abstractmethod
    async def mark_fired(
        self,
        agent_id: str,
        reminder_id: str,
        fire_time: datetime,
        roll_forward: Callable[[Reminder], datetime | None],
    ) -> FireResult:
        """Record that the reminder fired for `fire_time`, atomically: only if it is still
        active and due at exactly `fire_time` (else STALE, and nothing changes — so several
        schedulers may race). `roll_forward` gets the reminder as stored and returns its next
        fire time, or None for a one-shot, which is then deleted; a recurring one moves to
        that time, with `last_fired_at` and `fire_count` updated. `roll_forward` runs inside
        the write transaction: it must be a pure, quick function."""

    # goals (SPEC §4.8) -----------------------------------------------------------------------
    @abstractmethod
    async def add_goal(self, goal: Goal) -> None:
        """Store a new goal. An id that exists is a StoreError."""

    @abstractmethod
    async def get_goal(self, agent_id: str, goal_id: str) -> Goal | None: ...

    @abstractmethod
    async def update_goal(
        self,
        agent_id: str,
        goal_id: str,
        now: datetime,
        *,
        description: str | None = None,
        status: GoalStatus | None = None,
        outcome: str | None = None,
    ) -> Goal:
        """Revise a goal; None leaves a field as it is. A missing goal is a StoreError."""

    @abstractmethod
    async def list_goals(
        self, agent_id: str, *, statuses: Sequence[GoalStatus] | None = None, limit: int = 100
    ) -> list[Goal]:
        """Goals with one of `statuses` (None: all): open ones first, oldest first; then
        the closed ones, most recently updated first."""
