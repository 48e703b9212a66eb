"""Migration 1's tables, frozen as they were released (see migrations.py).

A copy, on purpose: `tables.py` holds the *current* tables and moves on; this module must
not, or a fresh database would be built differently from an upgraded one. Never edit it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CHAR,
    JSON,
    Boolean,
    Column,
    ForeignKeyConstraint,
    Index,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from persyn.store.schema.tables import UTCDateTime

__all__ = ["v1_metadata"]

v1_metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _id(name: str, **kwargs: Any) -> Column[str]:
    return Column(name, CHAR(26), **kwargs)


def _pk() -> Column[str]:
    return _id("id", primary_key=True)


def _agent_id() -> Column[str]:
    return _id("agent_id", nullable=False)


agents = Table(
    "agents",
    v1_metadata,
    _pk(),
    Column("name", String(200), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

events = Table(
    "events",
    v1_metadata,
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
    v1_metadata,
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
    v1_metadata,
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
    v1_metadata,
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
    v1_metadata,
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
    v1_metadata,
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
    v1_metadata,
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

flags = Table(
    "flags",
    v1_metadata,
    _pk(),
    _agent_id(),
    Column("key", String(500), nullable=False),
    Column("value", Text, nullable=False),
    UniqueConstraint("agent_id", "key"),  # the compare-and-set key
)
