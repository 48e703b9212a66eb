"""The one schema every backend shares (ARCHITECTURE §4), as SQLAlchemy Core tables.

Rules the tables follow, so a PostgreSQL backend can reuse them unchanged:
- every primary key is a ULID string (CHAR(26)); every row except `agents` carries `agent_id`;
- times are `UTCDateTime`: timezone-aware UTC in and out, whatever the database stores;
- rows that belong to another row of the same agent point at it through a composite
  foreign key `(agent_id, x_id)`, so the database itself refuses cross-agent links.

`agent_id` deliberately has no foreign key to `agents`: it is a namespace key, and callers may
store events for an agent before anything has called `ensure_agent`.

Beside the tables live the pieces every backend over them shares: `checked_id` (what may go
into an id column; defined in `rows.py`, beside the row validators), the row mappers that read rows back as the port's types, and
`load_person` (a person spans two tables). The tables here are the *current* schema.
Migration 1 created the first ones (it keeps a frozen copy), migration 3 `memory_records`; a
later change must be a new numbered migration (see migrations.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    CHAR,
    JSON,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    select,
    text,
)
from sqlalchemy.engine import Connection, Dialect, Row
from sqlalchemy.types import TypeDecorator

from persyn.core.events import CompletionMarker, Event, EventKind, Speaker
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.base import (
    ActivityEntry,
    AgentRow,
    Conversation,
    Goal,
    GoalStatus,
    Identity,
    Message,
    Person,
    Provenance,
    QuickFact,
    Reminder,
    ReminderAction,
    ReminderStatus,
    Role,
)
from persyn.store.directory import checked_address
from persyn.store.rows import checked_id

__all__ = [
    "ID_LENGTH",
    "UTCDateTime",
    "activity_from_row",
    "activity_runs",
    "activity_values",
    "agent_from_row",
    "agents",
    "checked_address",
    "checked_id",
    "completion_markers",
    "consolidations",
    "contact_addresses",
    "conversation_from_row",
    "conversation_participants",
    "conversations",
    "deliberation_traces",
    "event_from_row",
    "event_values",
    "events",
    "extraction_watermarks",
    "fact_from_row",
    "flags",
    "goal_from_row",
    "goals",
    "graph_entities",
    "graph_fact_participants",
    "graph_links",
    "graph_mentions",
    "graph_relations",
    "identities",
    "identities_by_person",
    "load_person",
    "marker_from_row",
    "memory_records",
    "message_from_row",
    "messages",
    "metadata",
    "observation_changes",
    "observations",
    "outbox",
    "person_from_row",
    "person_preferences",
    "persons",
    "provenance_from_row",
    "provenance_values",
    "quick_facts",
    "record_from_row",
    "record_values",
    "reminder_from_row",
    "reminder_values",
    "reminders",
]

ID_LENGTH = 26  # a canonical ULID string

# Stable constraint names, so later migrations can refer to (and drop) them on every backend.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC when it leaves the database.

    SQLite has no timezone type: SQLAlchemy stores a fixed-width ISO string and hands back a
    naive datetime. Normalising to UTC on the way in keeps those strings comparable in SQL
    (range filters, expiry) and lets us re-attach UTC on the way out. A naive input is taken
    to be UTC, as `ManualClock` does. On PostgreSQL this is plain TIMESTAMPTZ.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _id(name: str, **kwargs: Any) -> Column[str]:
    return Column(name, CHAR(ID_LENGTH), **kwargs)


def _pk() -> Column[str]:
    return _id("id", primary_key=True)


def _agent_id() -> Column[str]:
    return _id("agent_id", nullable=False)


agents = Table(
    "agents",
    metadata,
    _pk(),
    Column("name", String(200), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

events = Table(
    "events",
    metadata,
    _pk(),  # the event's own id: the dedup key
    _agent_id(),
    Column("kind", String(32), nullable=False),
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    Column("speaker", JSON(none_as_null=True), nullable=True),  # a `Speaker`, or NULL
    Column("text", Text, nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    Column("addressed", Boolean, nullable=False),
    Column("meta", JSON, nullable=False),
    Index(None, "agent_id", "received_at"),
)

completion_markers = Table(
    "completion_markers",
    metadata,
    _pk(),
    _agent_id(),
    _id("event_id", nullable=False),
    Column("transmitted", Boolean, nullable=False),
    Column("text", Text, nullable=True),
    Column("reason", Text, nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "event_id"),  # one marker per event: a second put replaces
    Index(None, "expires_at"),  # purge
)

persons = Table(
    "persons",
    metadata,
    _pk(),
    _agent_id(),
    Column("display_name", String(500), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("last_interaction_at", UTCDateTime(), nullable=True),
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
)

identities = Table(
    "identities",
    metadata,
    _pk(),
    _agent_id(),
    _id("person_id", nullable=False),
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    Column("speaker_id", String(500), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    # SPEC §4.4: (service, channel, speaker_id) names exactly one person per agent.
    UniqueConstraint("agent_id", "service", "channel", "speaker_id"),
    ForeignKeyConstraint(["agent_id", "person_id"], ["persons.agent_id", "persons.id"]),
    Index(None, "agent_id", "person_id"),
)

person_preferences = Table(
    "person_preferences",
    metadata,
    _pk(),
    _agent_id(),
    _id("person_id", nullable=False),
    Column("key", String(200), nullable=False),
    Column("value", Text, nullable=False),
    UniqueConstraint("agent_id", "person_id", "key"),
    ForeignKeyConstraint(["agent_id", "person_id"], ["persons.agent_id", "persons.id"]),
)

conversations = Table(
    "conversations",
    metadata,
    _pk(),
    _agent_id(),
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("participants", JSON, nullable=False),  # list of person ids, first-seen order
    Column("started_at", UTCDateTime(), nullable=False),
    Column("last_activity_at", UTCDateTime(), nullable=False),
    Column("closed_at", UTCDateTime(), nullable=True),
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    Index(None, "agent_id", "service", "channel", "started_at"),
    # At most one open conversation per channel and kind; the invariant open_conversation
    # relies on, enforced even against a writer that bypasses the store.
    Index(
        "uq_conversations_open",
        "agent_id",
        "service",
        "channel",
        "kind",
        unique=True,
        sqlite_where=text("closed_at IS NULL"),
        postgresql_where=text("closed_at IS NULL"),
    ),
)

messages = Table(
    "messages",
    metadata,
    _pk(),
    _agent_id(),
    _id("conversation_id", nullable=False),
    Column("role", String(16), nullable=False),
    _id("person_id", nullable=True),  # NULL when the agent itself speaks
    Column("speaker_name", String(500), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    _id("event_id", nullable=True),  # the inbound event this message belongs to
    ForeignKeyConstraint(["agent_id", "conversation_id"], ["conversations.agent_id", "conversations.id"]),
    ForeignKeyConstraint(["agent_id", "person_id"], ["persons.agent_id", "persons.id"]),
    Index(None, "agent_id", "conversation_id", "created_at"),
    Index(None, "agent_id", "created_at"),
    # Exactly-once replies: a retried pipeline run cannot store a second AGENT reply for
    # the same event (add_message's idempotency), whichever process retries it.
    Index(
        "uq_messages_agent_reply",
        "agent_id",
        "event_id",
        unique=True,
        sqlite_where=text("role = 'agent' AND event_id IS NOT NULL"),
        postgresql_where=text("role = 'agent' AND event_id IS NOT NULL"),
    ),
)


def _provenance() -> tuple[Column[Any], ...]:
    """Where a row formed (`Provenance`): the same columns as a memory record's, except that
    the channel may be NULL (formed on no channel: the agent on its own)."""
    return (
        Column("channel", String(700), nullable=True),
        Column("participant_ids", JSON, nullable=False),
        Column("sensitivity", String(32), nullable=False),
    )


def provenance_values(provenance: Provenance) -> dict[str, Any]:
    return {
        "channel": provenance.channel,
        "participant_ids": list(provenance.participant_ids),
        "sensitivity": provenance.sensitivity.value,
    }


def provenance_from_row(row: Row[Any]) -> Provenance:
    return Provenance(
        channel=row.channel,
        participant_ids=tuple(row.participant_ids),
        sensitivity=Sensitivity(row.sensitivity),
    )


# Quick facts: a small key -> value scratchpad of stable facts about a person, or about the
# agent itself (subject = the agent's id), kept per provenance (`scope`, `Provenance.scope`):
# what Ann noted in her direct messages is another row than what someone set elsewhere under
# the same key. No foreign key on subject: it names a person or the agent. Migration 10
# created this layout from this definition (freeze it there before altering the table).
quick_facts = Table(
    "quick_facts",
    metadata,
    _pk(),
    _agent_id(),
    _id("subject_id", nullable=False),
    Column("key", String(200), nullable=False),
    Column("value", Text, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    *_provenance(),
    Column("scope", Text, nullable=False),
    UniqueConstraint("agent_id", "subject_id", "key", "scope"),
)

# Observations about people (SPEC §4.4) and the audit trail of how each changed.
observations = Table(
    "observations",
    metadata,
    _pk(),
    _agent_id(),
    _id("subject_id", nullable=False),
    Column("kind", String(100), nullable=False),
    Column("value", Text, nullable=False),
    Column("observed_at", UTCDateTime(), nullable=False),
    _id("conversation_id", nullable=True),
    Index(None, "agent_id", "subject_id"),
)

observation_changes = Table(
    "observation_changes",
    metadata,
    _pk(),
    _agent_id(),
    _id("subject_id", nullable=False),
    _id("observation_id", nullable=False),
    Column("action", String(32), nullable=False),  # added | superseded | contradicted | supplemented
    Column("before", Text, nullable=True),
    Column("after", Text, nullable=True),
    Column("reason", Text, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Index(None, "agent_id", "subject_id", "at"),
)

# Contact addresses (SPEC §4.5): ways to reach a person beside the identities they wrote
# from, each under a short type label ("email", "phone", "matrix", "work"). Curated out of
# band; a merge moves them to the survivor.
contact_addresses = Table(
    "contact_addresses",
    metadata,
    _pk(),
    _agent_id(),
    _id("person_id", nullable=False),
    Column("label", String(32), nullable=False),
    Column("value", String(500), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "person_id", "label", "value"),  # also the per-person lookup
    ForeignKeyConstraint(["agent_id", "person_id"], ["persons.agent_id", "persons.id"]),
)

# Who took part in which conversation, one row per (conversation, participant): the index
# behind a contact's digest (SPEC App. B), so "this person's latest conversations" walks
# an index and stops after N rows instead of scanning `conversations.participants` (a JSON
# list). `started_at` is the conversation's (immutable) start, copied so the walk needs no
# join to order. Kept in step by open_conversation and merge_persons. No foreign key on
# person_id: like the JSON list, a participant id need not name a stored person.
conversation_participants = Table(
    "conversation_participants",
    metadata,
    _pk(),
    _agent_id(),
    _id("conversation_id", nullable=False),
    _id("person_id", nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "conversation_id", "person_id"),
    # Named by hand: the conventional names would pass PostgreSQL's 63-character limit.
    ForeignKeyConstraint(
        ["agent_id", "conversation_id"],
        ["conversations.agent_id", "conversations.id"],
        name="fk_conversation_participants_conversations",
    ),
    Index("ix_conversation_participants_by_person", "agent_id", "person_id", "started_at", "conversation_id"),
)

flags = Table(
    "flags",
    metadata,
    _pk(),
    _agent_id(),
    Column("key", String(500), nullable=False),
    Column("value", Text, nullable=False),
    UniqueConstraint("agent_id", "key"),  # the compare-and-set key
)


# Long-term memory (SPEC §5). `participant_ids`, `tags` and `message_ids` are JSON lists.
# `conversation_id` has no foreign key: a record outlives the dialog it came from, and
# imported history names conversations this store never saw. `embedding_model` and `dims`
# describe the record's current vector (NULL: none); the vector itself lives in a backend's
# vector index (sqlite-vec `memory_vectors_<dims>` tables; pgvector), keyed by the record id.
# Migration 8 also indexes (agent_id, conversation_id) by DDL (see migrations.py):
# declared here, migration 3 (which creates this table from this definition) would create
# it too; move it here when migration 3 is frozen.
memory_records = Table(
    "memory_records",
    metadata,
    _pk(),
    _agent_id(),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("channel", String(700), nullable=False),  # channel_key(service, channel)
    Column("participant_ids", JSON, nullable=False),
    Column("summary", Text, nullable=False),
    Column("importance", Integer, nullable=False),
    Column("tags", JSON, nullable=False),
    Column("emotion", String(200), nullable=True),
    Column("sensitivity", String(32), nullable=False),
    _id("conversation_id", nullable=True),
    Column("message_ids", JSON, nullable=False),
    Column("ref", String(500), nullable=True),
    Column("kind", String(32), nullable=False),
    Column("embedding_model", String(200), nullable=True),
    Column("dims", Integer, nullable=True),
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    UniqueConstraint("agent_id", "ref"),  # re-imports never duplicate; NULLs never collide
    Index(None, "agent_id", "created_at"),
    Index(None, "agent_id", "channel"),
)


# The knowledge graph (SPEC §4.3): entities and typed relations between them. An entity is
# one row per agent and normalised name (`key`); what the agent learned about it lives in
# `graph_mentions`, one per compartment it was learned in (channel, sensitivity, the people
# present), so the same compartment rules as memories decide what may surface. Relations
# carry that provenance themselves. `graph_fact_participants` lists the people present when
# a mention or relation was learned (the agent itself excluded), keyed by the fact's id.
# `graph_links` lists each relation from both ends, for traversal.
graph_entities = Table(
    "graph_entities",
    metadata,
    _pk(),
    _agent_id(),
    Column("name", String(300), nullable=False),
    Column("key", String(300), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    UniqueConstraint("agent_id", "key"),  # one entity per name: upserts never duplicate
)

graph_mentions = Table(
    "graph_mentions",
    metadata,
    _pk(),
    _agent_id(),
    _id("entity_id", nullable=False),
    # What the entity is (person, place...) as learned here: like its attributes, a kind
    # learned in one compartment is not shown in another.
    Column("kind", String(100), nullable=False),
    Column("channel", String(700), nullable=False),  # channel_key(service, channel)
    Column("sensitivity", String(32), nullable=False),
    Column("participants_key", Text, nullable=False),  # sorted person ids, comma-joined
    _id("conversation_id", nullable=True),
    Column("attributes", JSON, nullable=False),  # {name: value}
    Column("learned_at", UTCDateTime(), nullable=False),
    ForeignKeyConstraint(["agent_id", "entity_id"], ["graph_entities.agent_id", "graph_entities.id"]),
    Index(None, "agent_id", "entity_id"),
)

graph_relations = Table(
    "graph_relations",
    metadata,
    _pk(),
    _agent_id(),
    _id("source_id", nullable=False),
    Column("relation", String(100), nullable=False),
    _id("target_id", nullable=False),
    Column("channel", String(700), nullable=False),
    Column("sensitivity", String(32), nullable=False),
    Column("participants_key", Text, nullable=False),
    _id("conversation_id", nullable=True),
    Column("learned_at", UTCDateTime(), nullable=False),
    ForeignKeyConstraint(["agent_id", "source_id"], ["graph_entities.agent_id", "graph_entities.id"]),
    ForeignKeyConstraint(["agent_id", "target_id"], ["graph_entities.agent_id", "graph_entities.id"]),
    Index(None, "agent_id", "source_id"),
    Index(None, "agent_id", "target_id"),
)

# Each relation in both directions, so a traversal follows one index whichever way it points.
graph_links = Table(
    "graph_links",
    metadata,
    _pk(),
    _agent_id(),
    _id("from_id", nullable=False),
    _id("to_id", nullable=False),
    _id("relation_id", nullable=False),
    # Not (agent_id, from_id): ULIDs are unique anyway, and without an agent_id prefix the
    # planner can only walk outward from the recursive row, never scan the agent's links.
    Index(None, "from_id"),
)

graph_fact_participants = Table(
    "graph_fact_participants",
    metadata,
    _pk(),
    _agent_id(),
    _id("fact_id", nullable=False),  # a graph_mentions or graph_relations id
    _id("person_id", nullable=False),
    UniqueConstraint("agent_id", "fact_id", "person_id"),
    Index(None, "agent_id", "person_id"),  # merge re-attributes by person
)

# The persistent schedule (SPEC §4.7): reminders the agent set itself and the heartbeat
# (`kind`). `trigger` and `action` are JSON objects (the port's `Trigger` and
# `ReminderAction`); `next_fire_at` is what the scheduler scans, across agents.
reminders = Table(
    "reminders",
    metadata,
    _pk(),
    _agent_id(),
    Column("kind", String(32), nullable=False),
    Column("objective", Text, nullable=False),
    Column("trigger", JSON, nullable=False),
    Column("action", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("next_fire_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("last_fired_at", UTCDateTime(), nullable=True),
    Column("fire_count", Integer, nullable=False),
    *_provenance(),  # migration 10
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    Index(None, "status", "next_fire_at"),  # the scheduler's scan over every agent
    Index(None, "agent_id", "kind", "next_fire_at"),
)

# Goals the agent set itself (SPEC §4.8).
goals = Table(
    "goals",
    metadata,
    _pk(),
    _agent_id(),
    Column("description", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("outcome", Text, nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    *_provenance(),  # migration 10
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    Index(None, "agent_id", "status", "created_at"),
)

# Conversation jobs (migration 13): where each conversation's consolidation stands, and
# what each incremental reader (graph, observe) has read of it. No foreign keys: imported
# history and purged dialog leave states and watermarks naming conversations that are gone.
consolidations = Table(
    "consolidations",
    metadata,
    _agent_id(),
    _id("conversation_id", nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime(), nullable=True),
    Column("last_error", Text, nullable=True),
    Column("detail", Text, nullable=True),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("agent_id", "conversation_id"),
    Index(None, "status", "next_attempt_at"),  # the sweep's retries over every agent
)

extraction_watermarks = Table(
    "extraction_watermarks",
    metadata,
    _agent_id(),
    _id("conversation_id", nullable=False),
    Column("reader", String(32), nullable=False),
    _id("message_id", nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("agent_id", "conversation_id", "reader"),
)


# The log of self-initiated runs (SPEC §4.7; `ActivityEntry`), one row per run or skip, keyed
# by the run's id (its event id). Read newest first by (agent_id, at): the autonomy budget's
# rolling window and `persyn activity`. Migration 11 created it from this definition.
activity_runs = Table(
    "activity_runs",
    metadata,
    _pk(),
    _agent_id(),
    _id("run_id", nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("reminder_id", String(100), nullable=False),
    Column("objective", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("tokens", Integer, nullable=False),
    _id("conversation_id", nullable=True),
    *_provenance(),
    UniqueConstraint("agent_id", "run_id"),  # a replayed step logs its run once
    Index(None, "agent_id", "at"),
)

# What deliberation did for an inbound event (`DeliberationTrace`): one JSON object per
# event, written in parts as the activation goes. Migration 11 created it from this definition.
deliberation_traces = Table(
    "deliberation_traces",
    metadata,
    _pk(),
    _agent_id(),
    _id("event_id", nullable=False),
    Column("trace", JSON, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "event_id"),
)

# The outbox (migration 12, `store/outbox.py`): what the agent sends, written before delivery.
# The id is the idempotency key; `delivered_at` NULL means pending. Deliverers scan one
# agent's pending rows for one service in the order written.
outbox = Table(
    "outbox",
    metadata,
    _pk(),
    _agent_id(),
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    _id("conversation_id", nullable=False),
    _id("message_id", nullable=False),
    _id("event_id", nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("delivered_at", UTCDateTime(), nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=True),
    Index(None, "agent_id", "service", "delivered_at", "created_at"),
    Index(None, "created_at"),  # the purge
)


# row mapping between the tables and the port's types, for every backend --------------------
def agent_from_row(row: Row[Any]) -> AgentRow:
    return AgentRow(id=row.id, name=row.name, created_at=row.created_at)


def event_values(event: Event) -> dict[str, Any]:
    """The `events` row for `event`; `event_from_row` reads it back."""
    speaker = None if event.speaker is None else event.speaker.model_dump(mode="json")
    return {
        **event.model_dump(
            include={"id", "agent_id", "service", "channel", "text", "received_at", "addressed"}
        ),
        "kind": event.kind.value,
        "speaker": speaker,
        "meta": dict(event.meta),
    }


def event_from_row(row: Row[Any]) -> Event:
    return Event(
        id=row.id,
        agent_id=row.agent_id,
        kind=EventKind(row.kind),
        service=row.service,
        channel=row.channel,
        speaker=None if row.speaker is None else Speaker.model_validate(row.speaker),
        text=row.text,
        received_at=row.received_at,
        addressed=row.addressed,
        meta=dict(row.meta),
    )


def marker_from_row(row: Row[Any]) -> CompletionMarker:
    return CompletionMarker(
        event_id=row.event_id,
        transmitted=row.transmitted,
        text=row.text,
        reason=row.reason,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def person_from_row(row: Row[Any], person_identities: Sequence[Identity]) -> Person:
    return Person(
        id=row.id,
        agent_id=row.agent_id,
        display_name=row.display_name,
        kind=row.kind,
        created_at=row.created_at,
        last_interaction_at=row.last_interaction_at,
        identities=tuple(person_identities),
    )


def conversation_from_row(row: Row[Any]) -> Conversation:
    return Conversation(
        id=row.id,
        agent_id=row.agent_id,
        service=row.service,
        channel=row.channel,
        participant_ids=tuple(row.participants),
        started_at=row.started_at,
        last_activity_at=row.last_activity_at,
        closed_at=row.closed_at,
        kind=row.kind,
    )


def message_from_row(row: Row[Any]) -> Message:
    return Message(
        id=row.id,
        agent_id=row.agent_id,
        conversation_id=row.conversation_id,
        role=Role(row.role),
        person_id=row.person_id,
        speaker_name=row.speaker_name,
        text=row.text,
        created_at=row.created_at,
        event_id=row.event_id,
    )


def load_person(connection: Connection, agent_id: str, person_id: str) -> Person:
    row = connection.execute(
        select(persons).where(persons.c.agent_id == agent_id, persons.c.id == person_id)
    ).one()
    return person_from_row(row, identities_by_person(connection, agent_id, person_id).get(person_id, ()))


def identities_by_person(
    connection: Connection, agent_id: str, person_id: str | None = None
) -> dict[str, tuple[Identity, ...]]:
    statement = select(identities).where(identities.c.agent_id == agent_id)
    if person_id is not None:
        statement = statement.where(identities.c.person_id == person_id)
    grouped: dict[str, list[Identity]] = {}
    for row in connection.execute(statement.order_by(identities.c.created_at, identities.c.id)):
        identity = Identity(service=row.service, channel=row.channel, speaker_id=row.speaker_id)
        grouped.setdefault(row.person_id, []).append(identity)
    return {key: tuple(value) for key, value in grouped.items()}


def record_values(record: MemoryRecord) -> dict[str, Any]:
    """The `memory_records` row for `record` (without its vector); `record_from_row` reads it."""
    values = record.model_dump()
    values["participant_ids"] = list(record.participant_ids)
    values["tags"] = list(record.tags)
    values["message_ids"] = list(record.message_ids)
    values["sensitivity"] = record.sensitivity.value
    return values


def record_from_row(row: Row[Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row.id,
        agent_id=row.agent_id,
        created_at=row.created_at,
        channel=row.channel,
        participant_ids=tuple(row.participant_ids),
        summary=row.summary,
        importance=row.importance,
        tags=tuple(row.tags),
        emotion=row.emotion,
        sensitivity=Sensitivity(row.sensitivity),
        conversation_id=row.conversation_id,
        message_ids=tuple(row.message_ids),
        ref=row.ref,
        kind=row.kind,
    )


def reminder_values(reminder: Reminder) -> dict[str, Any]:
    """The `reminders` row for `reminder`; `reminder_from_row` reads it back."""
    values = reminder.model_dump(exclude={"trigger", "action", "status", "provenance"})
    values.update(provenance_values(reminder.provenance))
    values["trigger"] = reminder.trigger.model_dump(mode="json")
    values["action"] = reminder.action.model_dump(mode="json", exclude_none=True)
    values["status"] = reminder.status.value
    return values


def reminder_from_row(row: Row[Any]) -> Reminder:
    return Reminder.model_validate(
        {
            "id": row.id,
            "agent_id": row.agent_id,
            "kind": row.kind,
            "objective": row.objective,
            "trigger": row.trigger,
            "action": ReminderAction.model_validate(row.action),
            "status": ReminderStatus(row.status),
            "next_fire_at": row.next_fire_at,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "last_fired_at": row.last_fired_at,
            "fire_count": row.fire_count,
            "provenance": provenance_from_row(row),
        }
    )


def goal_from_row(row: Row[Any]) -> Goal:
    return Goal(
        id=row.id,
        agent_id=row.agent_id,
        description=row.description,
        status=GoalStatus(row.status),
        created_at=row.created_at,
        updated_at=row.updated_at,
        outcome=row.outcome,
        provenance=provenance_from_row(row),
    )


def fact_from_row(row: Row[Any]) -> QuickFact:
    return QuickFact(
        subject_id=row.subject_id,
        key=row.key,
        value=row.value,
        updated_at=row.updated_at,
        provenance=provenance_from_row(row),
    )


def activity_values(entry: ActivityEntry) -> dict[str, Any]:
    """The `activity_runs` row for `entry` (without its own key); `activity_from_row` reads it."""
    return {
        "agent_id": entry.agent_id,
        "run_id": entry.id,
        "at": entry.at,
        "kind": entry.kind,
        "reminder_id": entry.reminder_id,
        "objective": entry.objective,
        "outcome": entry.outcome,
        "tokens": entry.tokens,
        "conversation_id": entry.conversation_id,
        **provenance_values(entry.provenance),
    }


def activity_from_row(row: Row[Any]) -> ActivityEntry:
    """Built without re-validating: the autonomy budget reads up to 500 rows per run, each
    validated when it was logged."""
    return ActivityEntry.model_construct(
        id=row.run_id,
        agent_id=row.agent_id,
        at=row.at,
        kind=row.kind,
        reminder_id=row.reminder_id,
        objective=row.objective,
        outcome=row.outcome,
        tokens=row.tokens,
        conversation_id=row.conversation_id,
        provenance=provenance_from_row(row),
    )
