"""The one schema every backend shares (ARCHITECTURE §4), as SQLAlchemy Core tables.

Rules the tables follow, so a PostgreSQL backend can reuse them unchanged:
- every primary key is a ULID string (CHAR(26)); every row except `agents` carries `agent_id`;
- times are `UTCDateTime`: timezone-aware UTC in and out, whatever the database stores;
- rows that belong to another row of the same agent point at it through a composite
  foreign key `(agent_id, x_id)`, so the database itself refuses cross-agent links.

`agent_id` deliberately has no foreign key to `agents`: it is a namespace key, and callers may
store events for an agent before anything has called `ensure_agent`.

The `metadata`, the column types and the column builders are in `_columns.py`; the
tables of runs and what they send (activity log, deliberation traces, outbox, run state, spend
ledgers, checkpointed model calls) in `runs.py`; both are re-exported here. The knowledge
graph's tables are in `graph.py`, on the same `metadata`; the row mappers every backend
over these tables shares (the port's row types to rows and back) are in `mapping.py`. The tables
here and in `runs.py` are the *current* schema.
Migration 1 created the first ones (it keeps a frozen copy), migration 3 `memory_records`; a
later change must be a new numbered migration (see migrations.py).
"""

from __future__ import annotations

from sqlalchemy import (
    CHAR,
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from persyn.store.ports.directory import checked_address
from persyn.store.rows import checked_id
from persyn.store.schema._columns import (
    ID_LENGTH,
    NulSafeText,
    UTCDateTime,
    agent_column,
    id_column,
    metadata,
    primary_id,
    provenance_columns,
    provenance_values,
)
from persyn.store.schema.runs import (
    activity_runs,
    channel_spend,
    deliberation_traces,
    model_calls,
    outbox,
    run_conversations,
    run_states,
)

__all__ = [
    "ID_LENGTH",
    "UTCDateTime",
    "activity_runs",
    "agent_column",
    "agents",
    "artifact_versions",
    "channel_spend",
    "checked_address",
    "checked_id",
    "completion_markers",
    "consolidations",
    "contact_addresses",
    "conversation_participants",
    "conversations",
    "deliberation_traces",
    "emotion_readings",
    "events",
    "extraction_watermarks",
    "flags",
    "goals",
    "guardrail_checks",
    "guardrail_events",
    "guardrail_slots",
    "id_column",
    "identities",
    "memory_records",
    "messages",
    "metadata",
    "model_calls",
    "observation_changes",
    "observations",
    "outbox",
    "person_preferences",
    "persons",
    "primary_id",
    "provenance_columns",
    "provenance_values",
    "quick_facts",
    "reminders",
    "run_conversations",
    "run_states",
    "web_keys",
]


agents = Table(
    "agents",
    metadata,
    primary_id(),
    Column("name", String(200), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

events = Table(
    "events",
    metadata,
    primary_id(),  # the event's own id: the dedup key
    agent_column(),
    Column("kind", String(32), nullable=False),
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    Column("speaker", JSON(none_as_null=True), nullable=True),  # a `Speaker`, or NULL
    Column("text", Text, nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    Column("addressed", Boolean, nullable=False),
    Column("meta", JSON, nullable=False),
    Column("attachments", JSON, nullable=False, server_default="[]"),  # `Attachment`s (migration 25)
    Index(None, "agent_id", "received_at"),
)

completion_markers = Table(
    "completion_markers",
    metadata,
    primary_id(),
    agent_column(),
    id_column("event_id", nullable=False),
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
    primary_id(),
    agent_column(),
    Column("display_name", String(500), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("last_interaction_at", UTCDateTime(), nullable=True),
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
)

identities = Table(
    "identities",
    metadata,
    primary_id(),
    agent_column(),
    id_column("person_id", nullable=False),
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
    primary_id(),
    agent_column(),
    id_column("person_id", nullable=False),
    Column("key", String(200), nullable=False),
    Column("value", Text, nullable=False),
    UniqueConstraint("agent_id", "person_id", "key"),
    ForeignKeyConstraint(["agent_id", "person_id"], ["persons.agent_id", "persons.id"]),
)

conversations = Table(
    "conversations",
    metadata,
    primary_id(),
    agent_column(),
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
    primary_id(),
    agent_column(),
    id_column("conversation_id", nullable=False),
    Column("role", String(16), nullable=False),
    id_column("person_id", nullable=True),  # NULL when the agent itself speaks
    Column("speaker_name", String(500), nullable=False),
    Column("text", NulSafeText(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    id_column("event_id", nullable=True),  # the inbound event this message belongs to
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


# Quick facts: a small key -> value scratchpad of stable facts about a person, or about the
# agent itself (subject = the agent's id), kept per provenance (`scope`, `Provenance.scope`):
# what Ann noted in her direct messages is another row than what someone set elsewhere under
# the same key. No foreign key on subject: it names a person or the agent. Migration 10
# created this layout from this definition (freeze it there before altering the table).
quick_facts = Table(
    "quick_facts",
    metadata,
    primary_id(),
    agent_column(),
    id_column("subject_id", nullable=False),
    Column("key", String(200), nullable=False),
    Column("value", Text, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    *provenance_columns(),
    Column("scope", Text, nullable=False),
    UniqueConstraint("agent_id", "subject_id", "key", "scope"),
)

# Observations about people (SPEC §4.4) and the audit trail of how each changed.
observations = Table(
    "observations",
    metadata,
    primary_id(),
    agent_column(),
    id_column("subject_id", nullable=False),
    Column("kind", String(100), nullable=False),
    Column("value", Text, nullable=False),
    Column("observed_at", UTCDateTime(), nullable=False),
    id_column("conversation_id", nullable=True),
    Index(None, "agent_id", "subject_id"),
)

observation_changes = Table(
    "observation_changes",
    metadata,
    primary_id(),
    agent_column(),
    id_column("subject_id", nullable=False),
    id_column("observation_id", nullable=False),
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
    primary_id(),
    agent_column(),
    id_column("person_id", nullable=False),
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
    primary_id(),
    agent_column(),
    id_column("conversation_id", nullable=False),
    id_column("person_id", nullable=False),
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
    primary_id(),
    agent_column(),
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
    primary_id(),
    agent_column(),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("channel", String(700), nullable=False),  # channel_key(service, channel)
    Column("participant_ids", JSON, nullable=False),
    Column("summary", Text, nullable=False),
    Column("importance", Integer, nullable=False),
    Column("tags", JSON, nullable=False),
    Column("emotion", String(200), nullable=True),
    Column("sensitivity", String(32), nullable=False),
    id_column("conversation_id", nullable=True),
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


# The persistent schedule (SPEC §4.7): reminders the agent set itself and the heartbeat
# (`kind`). `trigger` and `action` are JSON objects (the port's `Trigger` and
# `ReminderAction`); `next_fire_at` is what the scheduler scans, across agents.
reminders = Table(
    "reminders",
    metadata,
    primary_id(),
    agent_column(),
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
    *provenance_columns(),  # migration 10
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    Index(None, "status", "next_fire_at"),  # the scheduler's scan over every agent
    Index(None, "agent_id", "kind", "next_fire_at"),
)

# Goals the agent set itself (SPEC §4.8).
goals = Table(
    "goals",
    metadata,
    primary_id(),
    agent_column(),
    Column("description", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("outcome", Text, nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    *provenance_columns(),  # migration 10
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    Index(None, "agent_id", "status", "created_at"),
)

# Conversation jobs (migration 13): where each conversation's consolidation stands, and
# what each incremental reader (graph, observe) has read of it. No foreign keys: imported
# history and purged dialog leave states and watermarks naming conversations that are gone.
consolidations = Table(
    "consolidations",
    metadata,
    agent_column(),
    id_column("conversation_id", nullable=False),
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
    agent_column(),
    id_column("conversation_id", nullable=False),
    Column("reader", String(32), nullable=False),
    id_column("message_id", nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("agent_id", "conversation_id", "reader"),
)


# Web API keys (migration 15, `store/ports/web_keys.py`): deployment-wide, not per agent. Only a
# key's SHA-256 is kept; the key itself is shown once, when created.
web_keys = Table(
    "web_keys",
    metadata,
    primary_id(),
    Column("name", String(200), nullable=False),
    Column("key_hash", CHAR(64), nullable=False, unique=True),
    id_column("contact_id", nullable=True),
    Column("operator", Boolean, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("revoked_at", UTCDateTime(), nullable=True),
)


# Guardrails (migration 17, `store/ports/guardrails.py`, SPEC §4.10). Every trigger is an event; a
# `block` lasts until `blocked_until` (or until the operator lifts it), and transmit's hard gate
# reads the blocks in force on every transmission. `subject` is what the pattern judged: a
# person id, a channel key (`service:channel`) or "" for the agent itself. A classifier's check
# is a row of `guardrail_checks`: its window end is the watermark (a person is judged again only
# after they said something new) and its tokens are what the daily budget sums.
guardrail_events = Table(
    "guardrail_events",
    metadata,
    primary_id(),
    agent_column(),
    Column("guardrail", String(64), nullable=False),
    Column("subject_kind", String(16), nullable=False),  # person | channel | agent
    Column("subject", String(700), nullable=False),
    id_column("person_id", nullable=True),
    Column("service", String(200), nullable=True),
    Column("channel", String(500), nullable=True),
    id_column("conversation_id", nullable=True),
    Column("reason", Text, nullable=False),
    Column("score", Float, nullable=False),
    Column("actions", JSON, nullable=False),
    Column("detected_at", UTCDateTime(), nullable=False),
    Column("blocked_until", UTCDateTime(), nullable=True),
    Column("lifted_at", UTCDateTime(), nullable=True),
    Index(None, "agent_id", "detected_at"),
    Index(None, "agent_id", "blocked_until"),
)

guardrail_checks = Table(
    "guardrail_checks",
    metadata,
    primary_id(),
    agent_column(),
    Column("guardrail", String(64), nullable=False),
    Column("subject", String(700), nullable=False),
    Column("window_end", UTCDateTime(), nullable=False),  # the newest message judged
    Column("checked_at", UTCDateTime(), nullable=False),
    Column("tokens", Integer, nullable=False),
    Index(None, "agent_id", "guardrail", "subject", "window_end"),
    Index(None, "agent_id", "checked_at"),
)

# Guardrail evaluation slots (migration 21, `store/ports/guardrails.py`): which process evaluates a
# pattern for an agent in one period of `[safety] evaluate_seconds`. The primary key makes the
# claim a conditional insert (ON CONFLICT DO NOTHING on both backends): when a server and a
# worker, or two workers, share the store, one of them wins each slot and the others skip it.
guardrail_slots = Table(
    "guardrail_slots",
    metadata,
    id_column("agent_id", primary_key=True),
    Column("guardrail", String(64), primary_key=True),
    Column("slot_start", UTCDateTime(), primary_key=True),
    Column("holder", String(200), nullable=False),  # host:pid, for the operator
    Column("claimed_at", UTCDateTime(), nullable=False),
    Index(None, "claimed_at"),
)

# Emotional state (migration 18, `store/ports/emotions.py`, SPEC §4.9): one reading per exchange
# (`event_id`, the id derived from it), and one per memory record consolidated from a
# conversation (`record_id`): the distribution over the configured categories and its top one,
# which is also the record's `emotion` tag.
emotion_readings = Table(
    "emotion_readings",
    metadata,
    primary_id(),
    agent_column(),
    Column("created_at", UTCDateTime(), nullable=False),
    id_column("conversation_id", nullable=True),
    id_column("event_id", nullable=True),
    id_column("record_id", nullable=True),
    Column("distribution", JSON, nullable=False),
    Column("top", String(32), nullable=False),
    Index(None, "agent_id", "created_at"),
    Index(None, "agent_id", "record_id"),
    Index(None, "agent_id", "conversation_id"),
)

# Shared artifacts (migration 19, `store/ports/artifacts.py`): deployment-wide, every version kept
# whole with the agent that wrote it; a name is unique within its scope (a channel key).
artifact_versions = Table(
    "artifact_versions",
    metadata,
    primary_id(),
    Column("scope", String(700), nullable=False),
    Column("name", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    id_column("agent_id", nullable=False),
    Column("content", Text, nullable=False),
    Column("note", String(500), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("scope", "name", "version"),
)
