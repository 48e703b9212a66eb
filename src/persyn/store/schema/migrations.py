"""Numbered schema migrations, applied in order (ARCHITECTURE §4; simonw/llm's ordered list).

`schema_version` holds one row per applied migration, so the version is its largest number
and the table doubles as a history. Each migration runs in its own transaction together with
the row that records it: a crash leaves the database at the previous version, never between.

Dialects: a step written in portable SQLAlchemy Core lives here and runs on every backend. A
step in a dialect's own DDL (FTS5, vec0, tsvector, table rebuilds) has no portable form here
(`Migration.apply` is None): each backend supplies it, with how it serialises migrators, in a
`DialectMigrations` it hands to `migrate` (`sqlite/migrations.py`, `postgres/migrations.py`),
so the schema knows no backend and the backends sit above it.

Racing processes: `migrate` re-reads the version *inside* each migration's transaction. On
SQLite the store's write connections open transactions with BEGIN IMMEDIATE, which takes the
database write lock first, so a second process waits (busy_timeout), then sees the migration
recorded and skips it. PostgreSQL takes a transaction-scoped advisory lock for the same effect.

Adding a migration: append a `Migration(N + 1, ...)`; never edit a released one. Migration 1
creates a frozen copy of the v1 tables (`_v1.py`), never the live `tables.metadata`.
Migration 3 creates `memory_records` from the live definition: the first later
migration that alters that table must first freeze migration 3 the same way (copy the
table as it is now), or fresh databases would get the new columns twice.
`tests/unit/store/test_migrations.py` pins the columns each migration creates so that moment
cannot pass unnoticed. Migrations 5 and 9 are frozen (`_v9.py`); migration 10 creates
`quick_facts` from the live definition again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Column, Integer, MetaData, PrimaryKeyConstraint, String, Table, func, insert, select
from sqlalchemy.engine import Connection

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity, channel_key
from persyn.store.base import GLOBAL, Provenance
from persyn.store.ports.leases import MAX_HOLDER, MAX_LEASE_NAME, MAX_LEASE_STATE
from persyn.store.schema import graph as schema_graph
from persyn.store.schema import tables as schema
from persyn.store.schema._migrate_runs import delete_flags_with_prefix, flags_with_prefix, runs_become_tables
from persyn.store.schema._v1 import v1_metadata
from persyn.store.schema._v9 import v5_quick_facts, v9_goals, v9_reminders
from persyn.store.schema.tables import UTCDateTime

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "PROVENANCE_COLUMNS",
    "UNATTRIBUTED",
    "DialectMigrations",
    "Migration",
    "attribute_legacy_reminders",
    "current_version",
    "migrate",
    "schema_version",
]

_version_metadata = MetaData()

schema_version = Table(
    "schema_version",
    _version_metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(200), nullable=False),
    Column("applied_at", schema.UTCDateTime(), nullable=False),
)

Apply = Callable[[Connection, str], None]  # (connection inside a transaction, dialect name)


@dataclass(frozen=True)
class Migration:
    """One schema step. `apply` is its portable form, run on every dialect; None when the step
    is written in each dialect's own DDL, which the backend's `DialectMigrations` supplies."""

    number: int
    name: str
    apply: Apply | None = None


def _no_lock(connection: Connection) -> None:
    """SQLite needs nothing: the write connection's BEGIN IMMEDIATE already holds the
    database write lock."""


@dataclass(frozen=True)
class DialectMigrations:
    """What a backend hands the runner: its dialect's name (SQLAlchemy's), its own form of
    the steps that have no portable one (by migration number; it may also replace a portable
    step), and how it serialises migrators inside each migration's transaction."""

    name: str
    steps: Mapping[int, Apply] = field(default_factory=dict[int, Apply])
    lock: Callable[[Connection], None] = _no_lock

    def step(self, migration: Migration) -> Apply:
        apply = self.steps.get(migration.number, migration.apply)
        if apply is None:
            raise StoreError(
                f"migration {migration.number} ({migration.name}) has no variant for dialect {self.name!r}"
            )
        return apply


def _create_tables(connection: Connection, dialect_name: str) -> None:
    """Migration 1: the v1 tables, as released (see the module note on freezing)."""
    v1_metadata.create_all(connection, checkfirst=False)


def _create_quick_facts(connection: Connection, dialect_name: str) -> None:
    """Migration 5: the quick-facts scratchpad, as released (frozen: `_v9.py`)."""
    v5_quick_facts.create(connection, checkfirst=False)


def _create_observations(connection: Connection, dialect_name: str) -> None:
    """Migration 6: observations about people and their audit trail, from the live
    definitions (freeze them here before a later migration alters those tables)."""
    schema.observations.create(connection, checkfirst=False)
    schema.observation_changes.create(connection, checkfirst=False)


def _create_graph(connection: Connection, dialect_name: str) -> None:
    """Migration 7: the knowledge graph (entities, mentions, relations, the people present
    when each fact was learned), from the live definitions (freeze them here before a later
    migration alters those tables)."""
    for table in (
        schema_graph.graph_entities,
        schema_graph.graph_mentions,
        schema_graph.graph_relations,
        schema_graph.graph_links,
        schema_graph.graph_fact_participants,
    ):
        table.create(connection, checkfirst=False)


# Migration 8's index on memory_records, by DDL (tables.py says why it is not declared there).
_MEMORY_BY_CONVERSATION = (
    "CREATE INDEX ix_memory_records_agent_id_conversation_id ON memory_records (agent_id, conversation_id)"
)
_BACKFILL_BATCH = 1000


def _create_directory(connection: Connection, dialect_name: str) -> None:
    """Migration 8: contact addresses, the conversation participant index (backfilled from
    every conversation's participant list) and memory records by conversation, from the live
    definitions (freeze them here before a later migration alters those tables)."""
    schema.contact_addresses.create(connection, checkfirst=False)
    schema.conversation_participants.create(connection, checkfirst=False)
    connection.exec_driver_sql(_MEMORY_BY_CONVERSATION)
    talks = schema.conversations.c
    rows = connection.execute(
        select(talks.agent_id, talks.id, talks.participants, talks.started_at).order_by(talks.id)
    ).all()
    batch: list[dict[str, object]] = []
    for row in rows:
        for person_id in dict.fromkeys(row.participants):
            batch.append(
                {
                    "id": new_id(row.started_at),
                    "agent_id": row.agent_id,
                    "conversation_id": row.id,
                    "person_id": person_id,
                    "started_at": row.started_at,
                }
            )
        if len(batch) >= _BACKFILL_BATCH:
            connection.execute(insert(schema.conversation_participants), batch)
            batch = []
    if batch:
        connection.execute(insert(schema.conversation_participants), batch)


def _create_schedule(connection: Connection, dialect_name: str) -> None:
    """Migration 9: reminders and goals (SPEC §4.7, §4.8), as released (frozen:
    `_v9.py`)."""
    v9_reminders.create(connection, checkfirst=False)
    v9_goals.create(connection, checkfirst=False)


# Migration 10: provenance (channel, people present, sensitivity) for quick facts, goals and
# reminders, so they pass `memory.access.may_surface` like memory records. What existing rows
# get, and why: nothing recorded which turn wrote a goal or a fact, so they cannot be
# attributed; they become the agent's own (no channel, nobody present, private), which
# surfaces only with nobody present — in the heartbeat's and person-less reminders'
# reflections — never to anyone in a conversation (the operator's CLI still lists them).
# That hides a harmless fact until it is noted again, never shows a confidence to a
# stranger. A reminder the agent set in a conversation recorded where (its action's service
# and channel) and with whom (its person): it keeps that channel, private to that person
# alone — fewer people than may have been there, so it can only withhold. The heartbeat is
# core infrastructure formed with nobody: global. The backends add the columns
# (`PROVENANCE_COLUMNS`) and rebuild quick facts in their own DDL; the attribution is here.
UNATTRIBUTED = Provenance(sensitivity=Sensitivity.PRIVATE)
PROVENANCE_COLUMNS = (
    "ALTER TABLE {table} ADD COLUMN channel VARCHAR(700)",
    "ALTER TABLE {table} ADD COLUMN participant_ids JSON NOT NULL DEFAULT '[]'",
    "ALTER TABLE {table} ADD COLUMN sensitivity VARCHAR(32) NOT NULL DEFAULT 'private'",
)


def _legacy_reminder_provenance(kind: str, action: dict[str, object]) -> Provenance:
    if kind == "heartbeat":
        return GLOBAL
    service, channel, person = action.get("service"), action.get("channel"), action.get("person_id")
    if isinstance(service, str) and isinstance(channel, str) and service and channel:
        people = (person,) if isinstance(person, str) and person else ()
        return Provenance(
            channel=channel_key(service, channel), participant_ids=people, sensitivity=Sensitivity.PRIVATE
        )
    return UNATTRIBUTED


def attribute_legacy_reminders(connection: Connection) -> None:
    """Migration 10, once the provenance columns exist: each reminder stored before them gets
    the provenance its action recorded (see the note above)."""
    old = v9_reminders.c
    for row in connection.execute(select(old.id, old.kind, old.action)).all():
        values = schema.provenance_values(_legacy_reminder_provenance(row.kind, dict(row.action)))
        connection.execute(schema.reminders.update().where(schema.reminders.c.id == row.id).values(**values))


# Migration 11: the flag prefixes that were a log and a per-event record become tables. The
# flags' values were written by the runtime as JSON (an `ActivityEntry`; a trace object);
# one that does not parse was already ignored by every reader, so it is dropped with the rest.
_ACTIVITY_PREFIX = "activity:"
_DELIBERATION_PREFIX = "deliberation:"
_ACTIVITY_FIELDS = ("at", "kind", "reminder_id", "objective", "outcome")


def _legacy_activity(agent_id: str, run_id: str, raw: str) -> dict[str, object] | None:
    """An `activity:` flag's entry as an `activity_runs` row, or None if it does not parse."""
    try:
        entry = json.loads(raw)
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in _ACTIVITY_FIELDS):
            return None
        at = datetime.fromisoformat(entry["at"])
        provenance = Provenance.model_validate(entry.get("provenance") or UNATTRIBUTED.model_dump())
        tokens = int(entry.get("tokens") or 0)
    except (ValueError, TypeError):
        return None
    conversation_id = entry.get("conversation_id")
    return {
        "id": new_id(at),
        "agent_id": agent_id,
        "run_id": run_id,
        "at": at,
        **{field: entry[field] for field in _ACTIVITY_FIELDS if field != "at"},
        "tokens": tokens,
        "conversation_id": conversation_id if isinstance(conversation_id, str) else None,
        **schema.provenance_values(provenance),
    }


def _legacy_trace(agent_id: str, event_id: str, raw: str, now: datetime) -> dict[str, object] | None:
    try:
        trace = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(trace, dict):
        return None
    return {"id": new_id(now), "agent_id": agent_id, "event_id": event_id, "trace": trace, "updated_at": now}


def _logs_become_tables(connection: Connection, dialect_name: str) -> None:
    """Migration 11: `activity_runs` and `deliberation_traces`, filled from the `activity:` and
    `deliberation:` flags (an upgraded deployment keeps its history), which are then deleted."""
    schema.activity_runs.create(connection, checkfirst=False)
    schema.deliberation_traces.create(connection, checkfirst=False)
    runs = [
        row
        for agent_id, run_id, raw in flags_with_prefix(connection, _ACTIVITY_PREFIX)
        if (row := _legacy_activity(agent_id, run_id, raw)) is not None
    ]
    if runs:
        connection.execute(insert(schema.activity_runs), runs)
    now = datetime.now(UTC)
    traces = [
        row
        for agent_id, event_id, raw in flags_with_prefix(connection, _DELIBERATION_PREFIX)
        if (row := _legacy_trace(agent_id, event_id, raw, now)) is not None
    ]
    if traces:
        connection.execute(insert(schema.deliberation_traces), traces)
    delete_flags_with_prefix(connection, _ACTIVITY_PREFIX)
    delete_flags_with_prefix(connection, _DELIBERATION_PREFIX)


# Migration 13: the flag prefixes that were a state machine and a cursor become tables.
# `consolidated:<conversation>` (value: how it ended) becomes a done consolidation, so an
# upgraded deployment never consolidates (re-bills) an old conversation again;
# `graph-seen:` and `observed-seen:` (value: the last message read) become the graph's and
# the observer's watermarks, so nothing already read is read again. The flags go.
_MOVED_WATERMARKS = {"graph-seen:": "graph", "observed-seen:": "observe"}
_CONSOLIDATED_FLAG = "consolidated:"


def _create_conversation_jobs(connection: Connection, dialect_name: str) -> None:
    """Migration 13: `consolidations` and `extraction_watermarks`, filled from the flags
    they replace (see the note above)."""
    schema.consolidations.create(connection, checkfirst=False)
    schema.extraction_watermarks.create(connection, checkfirst=False)
    flags = schema.flags.c
    now = datetime.now(UTC)
    moved = select(flags.agent_id, flags.key, flags.value).where(flags.key.like(_CONSOLIDATED_FLAG + "%"))
    states = [
        {
            "agent_id": row.agent_id,
            "conversation_id": row.key[len(_CONSOLIDATED_FLAG) :],
            "status": "done",
            "attempts": 0,
            "detail": row.value,
            "updated_at": now,
        }
        for row in connection.execute(moved)
    ]
    if states:
        connection.execute(insert(schema.consolidations), states)
    marks: list[dict[str, object]] = []
    for prefix, reader in _MOVED_WATERMARKS.items():
        read = select(flags.agent_id, flags.key, flags.value).where(flags.key.like(prefix + "%"))
        marks.extend(
            {
                "agent_id": row.agent_id,
                "conversation_id": row.key[len(prefix) :],
                "reader": reader,
                "message_id": row.value,
                "updated_at": now,
            }
            for row in connection.execute(read)
        )
    if marks:
        connection.execute(insert(schema.extraction_watermarks), marks)
    for prefix in (_CONSOLIDATED_FLAG, *_MOVED_WATERMARKS):
        connection.execute(schema.flags.delete().where(flags.key.like(prefix + "%")))


def _create_outbox(connection: Connection, dialect_name: str) -> None:
    """Migration 12: the outbox (`store/ports/outbox.py`), from the live definition (freeze it
    here before a later migration alters that table)."""
    schema.outbox.create(connection, checkfirst=False)


def _create_web_keys(connection: Connection, dialect_name: str) -> None:
    """Migration 15: web API keys (`store/ports/web_keys.py`), from the live definition (freeze it
    here before a later migration alters that table)."""
    schema.web_keys.create(connection, checkfirst=False)


def _create_guardrails(connection: Connection, dialect_name: str) -> None:
    """Migration 17: guardrail events and checks (`store/ports/guardrails.py`), from the live
    definitions (freeze them here before a later migration alters those tables)."""
    schema.guardrail_events.create(connection, checkfirst=False)
    schema.guardrail_checks.create(connection, checkfirst=False)


def _create_emotion_readings(connection: Connection, dialect_name: str) -> None:
    """Migration 18: emotional-state readings (`store/ports/emotions.py`), from the live definition."""
    schema.emotion_readings.create(connection, checkfirst=False)


def _create_artifacts(connection: Connection, dialect_name: str) -> None:
    """Migration 19: shared artifacts (`store/ports/artifacts.py`), from the live definition (freeze
    it here before a later migration alters that table)."""
    schema.artifact_versions.create(connection, checkfirst=False)


def _create_model_calls(connection: Connection, dialect_name: str) -> None:
    """Migration 20: model calls checkpointed inside a durable step (`store/ports/model_calls.py`),
    from the live definition (freeze it here before a later migration alters that table)."""
    schema.model_calls.create(connection, checkfirst=False)


def _create_guardrail_slots(connection: Connection, dialect_name: str) -> None:
    """Migration 21: guardrail evaluation slots (`store/ports/guardrails.py`), from the live
    definition (freeze it here before a later migration alters that table)."""
    schema.guardrail_slots.create(connection, checkfirst=False)


def _create_leases(connection: Connection, dialect_name: str) -> None:
    """Migration 24: leases (`store/ports/leases.py`) as they were then (frozen: migration 26
    added `state`)."""
    table = Table(
        "leases",
        MetaData(),
        Column("name", String(MAX_LEASE_NAME), nullable=False),
        Column("holder", String(MAX_HOLDER), nullable=False),
        Column("acquired_at", UTCDateTime(), nullable=False),
        Column("expires_at", UTCDateTime(), nullable=False),
        PrimaryKeyConstraint("name", name="pk_leases"),
    )
    table.create(connection, checkfirst=False)


def _add_event_attachments(connection: Connection, dialect_name: str) -> None:
    """Migration 25: what came with an event (`core.events.Attachment`, a JSON list); every
    event before it had none."""
    connection.exec_driver_sql("ALTER TABLE events ADD COLUMN attachments JSON NOT NULL DEFAULT '[]'")


def _add_lease_state(connection: Connection, dialect_name: str) -> None:
    """Migration 26: the holder's account of what it holds (`Lease.state`: a chat network's
    connection states), written with each renewal; empty for leases taken before."""
    connection.exec_driver_sql(
        f"ALTER TABLE leases ADD COLUMN state VARCHAR({MAX_LEASE_STATE}) NOT NULL DEFAULT ''"
    )


MIGRATIONS: Sequence[Migration] = (
    Migration(1, "create tables", _create_tables),
    Migration(2, "full-text search over messages"),
    Migration(3, "long-term memory records"),
    Migration(4, "record vectors partitioned by channel"),
    Migration(5, "quick facts about people and the agent", _create_quick_facts),
    Migration(6, "observations about people, with an audit trail", _create_observations),
    Migration(7, "the knowledge graph", _create_graph),
    Migration(8, "contact addresses and the conversation participant index", _create_directory),
    Migration(9, "reminders and goals", _create_schedule),
    Migration(10, "provenance for quick facts, goals and reminders"),
    Migration(11, "activity runs and deliberation traces as tables", _logs_become_tables),
    Migration(12, "the outbox", _create_outbox),
    Migration(13, "consolidation state and extraction watermarks as tables", _create_conversation_jobs),
    Migration(14, "run state, run conversations and channel ledgers as tables", runs_become_tables),
    Migration(15, "web API keys", _create_web_keys),
    Migration(16, "binary vector codes for large compartments"),
    Migration(17, "guardrail events and checks", _create_guardrails),
    Migration(18, "emotional-state readings", _create_emotion_readings),
    Migration(19, "shared artifacts", _create_artifacts),
    Migration(20, "model calls checkpointed inside a durable step", _create_model_calls),
    Migration(21, "guardrail evaluation slots", _create_guardrail_slots),
    Migration(22, "keyword posting lists for memory search"),
    Migration(23, "the keyword index's vocabulary, for bounding common words"),
    Migration(24, "leases: one process holds each chat network's connection", _create_leases),
    Migration(25, "attachments of inbound events", _add_event_attachments),
    Migration(26, "a lease's holder says how what it holds stands", _add_lease_state),
)
LATEST_VERSION = MIGRATIONS[-1].number


def current_version(connection: Connection) -> int:
    """The highest applied migration; 0 for an empty database."""
    if not connection.dialect.has_table(connection, schema_version.name):
        return 0
    return int(connection.scalar(select(func.coalesce(func.max(schema_version.c.version), 0))) or 0)


def migrate(connection: Connection, dialect: DialectMigrations, *, target: int | None = None) -> int:
    """Apply every missing migration up to `target` (default: all), each in its own
    transaction, with `dialect`'s own steps where a migration has no portable one; return the
    resulting version. Idempotent and safe against a racing process.

    `connection` must not be inside a transaction: each step begins and commits its own.
    """
    goal = LATEST_VERSION if target is None else target
    if not 0 <= goal <= LATEST_VERSION:
        raise StoreError(f"unknown schema version {goal!r}; this Persyn knows 0..{LATEST_VERSION}")
    with connection.begin():
        dialect.lock(connection)
        schema_version.create(connection, checkfirst=True)
    for migration in MIGRATIONS:
        if migration.number > goal:
            break
        _apply_if_missing(connection, dialect, migration)
    with connection.begin():
        return _checked_version(connection)


def _apply_if_missing(connection: Connection, dialect: DialectMigrations, migration: Migration) -> None:
    with connection.begin():
        dialect.lock(connection)
        if _checked_version(connection) >= migration.number:
            return  # applied earlier, or by a process that won the race
        dialect.step(migration)(connection, dialect.name)
        connection.execute(
            insert(schema_version).values(
                version=migration.number, name=migration.name, applied_at=datetime.now(UTC)
            )
        )


def _checked_version(connection: Connection) -> int:
    version = current_version(connection)
    if version > LATEST_VERSION:
        raise StoreError(
            f"database schema version {version!r} is newer than this Persyn supports "
            f"({LATEST_VERSION!r}); upgrade Persyn"
        )
    return version
