"""Frozen copies of the tables migrations 5 and 9 created, as released: `quick_facts`
(migration 5) and `reminders`, `goals` (migration 9). Migration 10 gave them provenance; the
live definitions in `tables.py` are the current layout. Never edit these."""

from __future__ import annotations

from sqlalchemy import CHAR, JSON, Column, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

from persyn.store.schema.tables import ID_LENGTH, UTCDateTime

__all__ = ["v5_quick_facts", "v9_goals", "v9_metadata", "v9_reminders"]

v9_metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

v5_quick_facts = Table(
    "quick_facts",
    v9_metadata,
    Column("id", CHAR(ID_LENGTH), primary_key=True),
    Column("agent_id", CHAR(ID_LENGTH), nullable=False),
    Column("subject_id", CHAR(ID_LENGTH), nullable=False),
    Column("key", String(200), nullable=False),
    Column("value", Text, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "subject_id", "key"),
)

v9_reminders = Table(
    "reminders",
    v9_metadata,
    Column("id", CHAR(ID_LENGTH), primary_key=True),
    Column("agent_id", CHAR(ID_LENGTH), nullable=False),
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
    UniqueConstraint("agent_id", "id"),
    Index(None, "status", "next_fire_at"),
    Index(None, "agent_id", "kind", "next_fire_at"),
)

v9_goals = Table(
    "goals",
    v9_metadata,
    Column("id", CHAR(ID_LENGTH), primary_key=True),
    Column("agent_id", CHAR(ID_LENGTH), nullable=False),
    Column("description", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("outcome", Text, nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "id"),
    Index(None, "agent_id", "status", "created_at"),
)
