"""Schema migrations: an ordered, gap-free list that any database can be brought up by."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, inspect, text

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.store.base import Goal
from persyn.store.postgres.migrations import POSTGRES_MIGRATIONS
from persyn.store.schema import tables as schema
from persyn.store.schema.migrations import (
    LATEST_VERSION,
    MIGRATIONS,
    DialectMigrations,
    current_version,
    migrate,
    schema_version,
)
from persyn.store.sqlite.migrations import SQLITE_MIGRATIONS
from persyn.store.sqlite.store import SQLiteStore, create_sqlite_engine

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

# The tables and columns migration 1 creates. If this test fails you changed a v1 table in
# schema/tables.py: add a new migration for the change and freeze migration 1 (migrations.py says how).
V1_COLUMNS = {
    table: columns.split()
    for table, columns in {
        "agents": "id name created_at",
        "events": "id agent_id kind service channel speaker text received_at addressed meta",
        "completion_markers": "id agent_id event_id transmitted text reason created_at expires_at",
        "persons": "id agent_id display_name kind created_at last_interaction_at",
        "identities": "id agent_id person_id service channel speaker_id created_at",
        "person_preferences": "id agent_id person_id key value",
        "conversations": "id agent_id service channel kind participants started_at last_activity_at "
        "closed_at",
        "messages": "id agent_id conversation_id role person_id speaker_name text created_at event_id",
        "flags": "id agent_id key value",
        "schema_version": "version name applied_at",
    }.items()
}

# The columns migration 3 creates from the live `schema.memory_records`. If this test fails you
# changed that table: add a new migration for the change and freeze migration 3 first.
V3_MEMORY_COLUMNS = [
    "id",
    "agent_id",
    "created_at",
    "channel",
    "participant_ids",
    "summary",
    "importance",
    "tags",
    "emotion",
    "sensitivity",
    "conversation_id",
    "message_ids",
    "ref",
    "kind",
    "embedding_model",
    "dims",
]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """The store's own write engine (BEGIN IMMEDIATE), on an empty file."""
    created = create_sqlite_engine(tmp_path / "persyn.db", writer=True)
    try:
        yield created
    finally:
        created.dispose()


def _version(engine: Engine) -> int:
    with engine.connect() as connection:
        return current_version(connection)


def _migrate(engine: Engine, target: int | None = None) -> int:
    with engine.connect() as connection:
        return migrate(connection, SQLITE_MIGRATIONS, target=target)


def _schema_sql(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT name, sql FROM sqlite_master ORDER BY name"))
        return [(row.name, row.sql or "") for row in rows]


def test_migrations_are_numbered_one_to_n_without_gaps() -> None:
    assert [m.number for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert LATEST_VERSION == len(MIGRATIONS) >= 2
    assert len({m.name for m in MIGRATIONS}) == len(MIGRATIONS)


def test_each_backend_supplies_every_step_that_has_no_portable_form() -> None:
    """A step in a dialect's own DDL lives in each backend, which hands it to the runner; the
    schema names no backend. Neither backend offers a step for a migration that does not exist."""
    own = {m.number for m in MIGRATIONS if m.apply is None}
    assert own  # FTS5/vec0 on SQLite, tsvector/posting lists on PostgreSQL
    for dialect in (SQLITE_MIGRATIONS, POSTGRES_MIGRATIONS):
        assert own <= set(dialect.steps), dialect.name
        assert set(dialect.steps) <= {m.number for m in MIGRATIONS}, dialect.name


def test_a_dialect_without_a_step_is_refused_at_that_migration(engine: Engine) -> None:
    """Migration 2 has only dialect forms: a dialect that supplies none stops before it, with
    the database left at version 1 (each migration is its own transaction)."""
    with engine.connect() as connection, pytest.raises(StoreError, match=r"migration 2 .* 'bare'"):
        migrate(connection, DialectMigrations("bare"))
    assert _version(engine) == 1


def test_an_empty_database_is_at_version_zero(engine: Engine) -> None:
    assert _version(engine) == 0


def test_applying_twice_is_a_no_op(engine: Engine) -> None:
    assert _migrate(engine) == LATEST_VERSION
    before = _schema_sql(engine)
    assert _migrate(engine) == LATEST_VERSION
    assert _schema_sql(engine) == before
    with engine.connect() as connection:
        versions = connection.execute(schema_version.select().order_by(schema_version.c.version)).all()
    assert [row.version for row in versions] == [m.number for m in MIGRATIONS]


def test_migration_one_creates_the_v1_tables(engine: Engine) -> None:
    assert _migrate(engine, target=1) == 1
    with engine.connect() as connection:
        inspector = inspect(connection)
        found = {
            name: [c["name"] for c in inspector.get_columns(name)] for name in inspector.get_table_names()
        }
    assert found == V1_COLUMNS


def test_a_version_one_database_is_migrated_to_the_latest(engine: Engine) -> None:
    _migrate(engine, target=1)
    agent_id, conversation_id = new_id(), new_id(T0)
    with engine.begin() as connection:  # dialog stored before search existed
        connection.execute(
            insert(schema.conversations).values(
                id=conversation_id, agent_id=agent_id, service="terminal", channel="main", kind="dialog",
                participants=[], started_at=T0, last_activity_at=T0,
            )
        )  # fmt: skip
        connection.execute(
            insert(schema.messages).values(
                id=new_id(T0), agent_id=agent_id, conversation_id=conversation_id, role="user",
                speaker_name="Ann", text="an old remark about otters", created_at=T0,
            )
        )  # fmt: skip
    assert _version(engine) == 1

    assert _migrate(engine) == LATEST_VERSION
    assert _version(engine) == LATEST_VERSION
    with engine.connect() as connection:
        hits = connection.execute(text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'otters'"))
        assert len(hits.all()) == 1  # migration 2 indexed what was already there


def test_a_database_from_a_newer_persyn_is_refused(engine: Engine) -> None:
    _migrate(engine)
    with engine.begin() as connection:
        connection.execute(
            insert(schema_version).values(version=LATEST_VERSION + 1, name="future", applied_at=T0)
        )
    with pytest.raises(StoreError, match="newer"):
        _migrate(engine)


def test_an_unknown_target_is_refused(engine: Engine) -> None:
    with pytest.raises(StoreError, match="unknown schema version"):
        _migrate(engine, target=LATEST_VERSION + 1)


async def test_stores_racing_to_set_up_one_file_agree(tmp_path: Path) -> None:
    stores = [SQLiteStore(tmp_path / "race.db") for _ in range(4)]
    try:
        await asyncio.gather(*(store.setup() for store in stores))
        assert [await store.schema_version() for store in stores] == [LATEST_VERSION] * 4
    finally:
        for store in stores:
            await store.close()


def test_migration_three_creates_memory_records_and_their_keyword_index(engine: Engine) -> None:
    assert _migrate(engine, target=2) == 2
    tables_at_two = {name for name, _ in _schema_sql(engine)}
    assert "memory_records" not in tables_at_two
    assert _migrate(engine, target=3) == 3
    with engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("memory_records")]
    assert columns == V3_MEMORY_COLUMNS
    names = {name for name, _ in _schema_sql(engine)}
    assert {"memory_fts", "memory_fts_insert", "memory_fts_delete", "memory_fts_update"} <= names
    assert not any(name.startswith("memory_vec_") for name in names)  # created with the first vector


def test_migration_five_creates_quick_facts(engine: Engine) -> None:
    assert _migrate(engine, target=4) == 4
    assert "quick_facts" not in {name for name, _ in _schema_sql(engine)}
    assert _migrate(engine, target=5) == 5
    with engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("quick_facts")]
    # Created from the live definition: if this fails, freeze migration 5 first.
    assert columns == ["id", "agent_id", "subject_id", "key", "value", "updated_at"]


def test_migration_six_creates_observations_and_their_audit_trail(engine: Engine) -> None:
    assert _migrate(engine, target=6) == 6
    with engine.connect() as connection:
        found = inspect(connection)
        observation_columns = [c["name"] for c in found.get_columns("observations")]
        change_columns = [c["name"] for c in found.get_columns("observation_changes")]
    # Created from the live definitions: if this fails, freeze migration 6 first.
    assert observation_columns == [
        "id",
        "agent_id",
        "subject_id",
        "kind",
        "value",
        "observed_at",
        "conversation_id",
    ]
    assert change_columns == [
        "id", "agent_id", "subject_id", "observation_id", "action", "before", "after", "reason", "at",
    ]  # fmt: skip


def test_migration_one_is_frozen_and_ignores_later_tables(engine: Engine) -> None:
    """Migration 1 builds its own copy of the v1 tables, not the live schema."""
    _migrate(engine, target=1)
    with engine.connect() as connection:
        assert "memory_records" not in inspect(connection).get_table_names()
    assert "memory_records" in schema.metadata.tables


async def test_migration_four_moves_vectors_into_channel_partitions(tmp_path: Path) -> None:
    """A database whose vectors are in migration 3's layout (one agent-partitioned vec0
    table per size, channel as a metadata column) keeps every vector, searchable per
    channel, after the upgrade."""
    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id, other = new_id(), new_id()
    rows = [  # (record id, agent, channel, vector)
        (new_id(T0), agent_id, "terminal:main", [1.0, 0.0, 0.0, 0.0]),
        (new_id(T0), agent_id, "terminal:main", [0.6, 0.8, 0.0, 0.0]),
        (new_id(T0), agent_id, "discord:a-long-channel-name", [1.0, 0.0, 0.0, 0.0]),
        (new_id(T0), other, "terminal:main", [1.0, 0.0, 0.0, 0.0]),
        (new_id(T0), agent_id, "terminal:main", [0.0, 0.0, 1.0]),
    ]
    try:
        _migrate(engine, target=3)
        with engine.begin() as connection:
            for dims in (3, 4):  # the layout `put_vector` created before migration 4
                connection.exec_driver_sql(
                    f"CREATE VIRTUAL TABLE memory_vec_{dims} USING vec0(record_id text primary key, "
                    f"agent_id text partition key, embedding float[{dims}] distance_metric=cosine, "
                    "channel text, embedding_model text)"
                )
            for record_id, owner, channel, vector in rows:
                connection.execute(
                    insert(schema.memory_records).values(
                        id=record_id, agent_id=owner, created_at=T0, channel=channel, participant_ids=[],
                        summary="a memory", importance=5, tags=[], sensitivity="private", message_ids=[],
                        kind="exchange", embedding_model="m1", dims=len(vector),
                    )
                )  # fmt: skip
                connection.execute(
                    text(
                        f"INSERT INTO memory_vec_{len(vector)}(record_id, agent_id, embedding, channel, "
                        "embedding_model) VALUES (:id, :agent, :embedding, :channel, 'm1')"
                    ),
                    {"id": record_id, "agent": owner, "embedding": struct.pack(f"<{len(vector)}f", *vector),
                     "channel": channel},
                )  # fmt: skip
        assert _migrate(engine) == LATEST_VERSION
        names = {name for name, _ in _schema_sql(engine)}
    finally:
        engine.dispose()
    assert {"memory_vectors_3", "memory_vectors_4"} <= names
    assert not any(name.startswith("memory_vec_") for name in names)  # shadow tables went too

    store = SQLiteStore(path)
    await store.setup()
    try:
        main = await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, ["terminal:main"])
        assert [hit[0] for hit in main] == [rows[0][0], rows[1][0]]
        assert [hit[1] for hit in main] == pytest.approx([0.0, 0.4], abs=1e-6)
        discord = await store.vector_candidates(agent_id, [1, 0, 0, 0], 1, ["discord:a-long-channel-name"])
        assert [hit[0] for hit in discord] == [rows[2][0]]
        assert len(await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)) == 3
        assert [hit[0] for hit in await store.vector_candidates(other, [1, 0, 0, 0], 10, None)] == [
            rows[3][0]
        ]
        assert [hit[0] for hit in await store.vector_candidates(agent_id, [0, 0, 1], 10, None)] == [
            rows[4][0]
        ]
        assert await store.delete_records(agent_id, [rows[0][0], rows[4][0]]) == 2
        nearest = await store.vector_candidates(agent_id, [1, 0, 0, 0], 1, None)
        assert [hit[0] for hit in nearest] == [rows[2][0]]
    finally:
        await store.close()


async def test_migration_eight_backfills_the_participant_index_from_a_version_six_database(
    tmp_path: Path,
) -> None:
    """Conversations stored before the index existed are found through it after the
    upgrade, newest first; addresses and the memory index by conversation are created."""
    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id, other_agent, sam, ann = new_id(), new_id(), new_id(T0), new_id(T0)
    talks = [  # (conversation id, agent, start, participants)
        (new_id(T0), agent_id, T0, [sam]),
        (new_id(T0), agent_id, T0 + timedelta(days=1), [sam, ann]),
        (new_id(T0), agent_id, T0 + timedelta(days=2), [ann]),
        (new_id(T0), agent_id, T0 + timedelta(days=3), []),
        (new_id(T0), other_agent, T0 + timedelta(days=4), [sam]),
    ]
    try:
        assert _migrate(engine, target=6) == 6
        with engine.begin() as connection:
            for conversation_id, owner, start, participants in talks:
                connection.execute(
                    insert(schema.conversations).values(
                        id=conversation_id, agent_id=owner, service="slack", channel="general",
                        kind="dialog", participants=participants, started_at=start,
                        last_activity_at=start, closed_at=start,
                    )
                )  # fmt: skip
        assert _migrate(engine, target=8) == 8
        with engine.connect() as connection:
            found = inspect(connection)
            address_columns = [c["name"] for c in found.get_columns("contact_addresses")]
            index_columns = [c["name"] for c in found.get_columns("conversation_participants")]
            memory_indexes = {i["name"]: i["column_names"] for i in found.get_indexes("memory_records")}
            indexed = connection.execute(text("SELECT count(*) FROM conversation_participants")).scalar()
    finally:
        engine.dispose()
    # Created from the live definitions: if this fails, freeze migration 8 first.
    assert address_columns == ["id", "agent_id", "person_id", "label", "value", "created_at"]
    assert index_columns == ["id", "agent_id", "conversation_id", "person_id", "started_at"]
    assert memory_indexes["ix_memory_records_agent_id_conversation_id"] == ["agent_id", "conversation_id"]
    assert indexed == 5

    store = SQLiteStore(path)
    await store.setup()
    try:
        assert [c.id for c in await store.person_conversations(agent_id, sam, 10)] == [
            talks[1][0],
            talks[0][0],
        ]
        assert [c.id for c in await store.person_conversations(agent_id, ann, 1)] == [talks[2][0]]
        assert [c.id for c in await store.person_conversations(other_agent, sam, 10)] == [talks[4][0]]
    finally:
        await store.close()


async def test_migration_nine_adds_reminders_and_goals_to_a_version_six_database(tmp_path: Path) -> None:
    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id = new_id()
    try:
        assert _migrate(engine, target=6) == 6
        with engine.begin() as connection:  # something stored at version 6 survives
            connection.execute(
                insert(schema.quick_facts).values(
                    id=new_id(T0), agent_id=agent_id, subject_id=agent_id, key="home", value="Lisbon",
                    updated_at=T0,
                )
            )  # fmt: skip
        assert not {"reminders", "goals"} & {name for name, _ in _schema_sql(engine)}
        assert _migrate(engine, target=9) == 9
        with engine.connect() as connection:
            found = inspect(connection)
            reminder_columns = [c["name"] for c in found.get_columns("reminders")]
            goal_columns = [c["name"] for c in found.get_columns("goals")]
    finally:
        engine.dispose()
    # Created from the live definitions: if this fails, freeze migration 9 first.
    assert reminder_columns == [
        "id", "agent_id", "kind", "objective", "trigger", "action", "status", "next_fire_at",
        "created_at", "updated_at", "last_fired_at", "fire_count",
    ]  # fmt: skip
    assert goal_columns == ["id", "agent_id", "description", "status", "outcome", "created_at", "updated_at"]

    store = SQLiteStore(path)
    await store.setup()
    try:
        assert await store.facts(agent_id, agent_id) == {"home": "Lisbon"}
        goal = Goal(id=new_id(T0), agent_id=agent_id, description="Settle in", created_at=T0, updated_at=T0)
        await store.add_goal(goal)
        assert await store.list_goals(agent_id) == [goal]
    finally:
        await store.close()


def test_a_persons_latest_conversations_walk_the_index_without_sorting(engine: Engine) -> None:
    """The digest's cost must not grow with history: SQLite answers the query from the
    participant index in order (no temporary sort of every row the person has)."""
    from sqlalchemy.dialects import sqlite

    from persyn.store.sql.directory import person_conversations_query

    _migrate(engine)
    query = person_conversations_query(new_id(), new_id(), 5).compile(
        dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}
    )
    with engine.connect() as connection:
        plan = " | ".join(str(row[-1]) for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}"))
    assert "ix_conversation_participants_by_person" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


def test_migration_seven_creates_the_graph_tables_on_a_version_six_database(tmp_path: Path) -> None:
    engine = create_sqlite_engine(tmp_path / "persyn.db", writer=True)
    try:
        assert _migrate(engine, target=6) == 6
        assert not {n for n, _ in _schema_sql(engine)} & {"graph_entities", "graph_relations"}
        assert _migrate(engine, target=7) == 7
        with engine.connect() as connection:
            found = inspect(connection)
            columns = {
                t: [c["name"] for c in found.get_columns(t)]
                for t in found.get_table_names()
                if t.startswith("graph_")
            }
            link_indexes = [i["column_names"] for i in found.get_indexes("graph_links")]
    finally:
        engine.dispose()
    # Created from the live definitions: if this fails, freeze migration 7 first.
    assert columns == {
        "graph_entities": ["id", "agent_id", "name", "key", "created_at", "updated_at"],
        "graph_mentions": [
            "id", "agent_id", "entity_id", "kind", "channel", "sensitivity", "participants_key",
            "conversation_id", "attributes", "learned_at",
        ],
        "graph_relations": [
            "id", "agent_id", "source_id", "relation", "target_id", "channel", "sensitivity",
            "participants_key", "conversation_id", "learned_at",
        ],
        "graph_links": ["id", "agent_id", "from_id", "to_id", "relation_id"],
        "graph_fact_participants": ["id", "agent_id", "fact_id", "person_id"],
    }  # fmt: skip
    assert link_indexes == [["from_id"]]  # traversal walks outward from the recursive row


async def test_migration_ten_gives_existing_facts_goals_and_reminders_a_safe_provenance(
    tmp_path: Path,
) -> None:
    """Rows from before provenance: what cannot be attributed becomes the agent's own (no
    channel, nobody present, private: only its reflections see it); a reminder set in a
    conversation keeps that channel, private to its person; the heartbeat is global."""
    from persyn.core.records import Sensitivity
    from persyn.store.base import GLOBAL, Provenance
    from persyn.store.schema._v9 import v5_quick_facts, v9_goals, v9_reminders

    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id, ann = new_id(T0), new_id(T0)
    at = {"kind": "at", "at": "2026-01-06T09:00:00+00:00"}
    reminder_ids = {name: new_id(T0) for name in ("heartbeat", "in-dm", "person-only", "nothing")}
    actions: dict[str, dict[str, str]] = {
        "heartbeat": {},
        "in-dm": {"person_id": ann, "service": "discord", "channel": "dm-ann"},
        "person-only": {"person_id": ann},
        "nothing": {},
    }
    goal_id = new_id(T0)
    try:
        assert _migrate(engine, target=9) == 9
        with engine.begin() as connection:
            for name, reminder_id in reminder_ids.items():
                connection.execute(
                    insert(v9_reminders).values(
                        id=reminder_id, agent_id=agent_id, kind="heartbeat" if name == "heartbeat" else "reminder",
                        objective=name, trigger=at, action=actions[name], status="active", next_fire_at=T0,
                        created_at=T0, updated_at=T0, fire_count=0,
                    )
                )  # fmt: skip
            connection.execute(
                insert(v9_goals).values(
                    id=goal_id, agent_id=agent_id, description="Plan the party", status="open",
                    created_at=T0, updated_at=T0,
                )
            )  # fmt: skip
            for subject in (ann, agent_id):
                connection.execute(
                    insert(v5_quick_facts).values(
                        id=new_id(T0), agent_id=agent_id, subject_id=subject, key="door code", value="4711",
                        updated_at=T0,
                    )
                )  # fmt: skip
        assert _migrate(engine, target=10) == 10
        with engine.connect() as connection:
            found = inspect(connection)
            columns = {
                t: [c["name"] for c in found.get_columns(t)] for t in ("quick_facts", "goals", "reminders")
            }
            tables = set(found.get_table_names())
    finally:
        engine.dispose()
    provenance = ["channel", "participant_ids", "sensitivity"]
    # quick_facts is created from the live definition: if this fails, freeze migration 10 first.
    assert columns["quick_facts"] == [
        "id", "agent_id", "subject_id", "key", "value", "updated_at", *provenance, "scope",
    ]  # fmt: skip
    assert columns["goals"][-3:] == provenance and columns["reminders"][-3:] == provenance
    assert "quick_facts_v5" not in tables

    unattributed = Provenance(sensitivity=Sensitivity.PRIVATE)
    store = SQLiteStore(path)
    await store.setup()
    try:
        reminders = {r.objective: r.provenance for r in await store.list_reminders(agent_id, kind=None)}
        assert reminders == {
            "heartbeat": GLOBAL,
            "in-dm": Provenance(
                channel="discord:dm-ann", participant_ids=(ann,), sensitivity=Sensitivity.PRIVATE
            ),
            "person-only": unattributed,
            "nothing": unattributed,
        }
        goal = await store.get_goal(agent_id, goal_id)
        assert goal is not None and goal.provenance == unattributed
        for subject in (ann, agent_id):
            (fact,) = await store.fact_rows(agent_id, subject)
            assert (fact.key, fact.value, fact.provenance) == ("door code", "4711", unattributed)
        # From now on a key is kept per scope: Ann's DM gets its own row beside the old one.
        in_dm = Provenance(channel="discord:dm-ann", participant_ids=(ann,), sensitivity=Sensitivity.PRIVATE)
        await store.set_fact(agent_id, ann, "door code", "0815", T0 + timedelta(days=1), provenance=in_dm)
        assert [(f.value, f.provenance) for f in await store.fact_rows(agent_id, ann)] == [
            ("0815", in_dm),
            ("4711", unattributed),
        ]
        assert await store.facts(agent_id, ann) == {"door code": "0815"}  # the operator: newest
    finally:
        await store.close()


async def test_migration_eleven_moves_the_activity_log_and_deliberation_traces_out_of_flags(
    tmp_path: Path,
) -> None:
    """An upgraded deployment keeps its history: `activity:` and `deliberation:` flags become
    rows of the new tables (a value that never parsed is dropped, as every reader skipped it),
    and those flags are deleted; other flags stay."""
    from persyn.core.records import Sensitivity
    from persyn.store.base import Provenance

    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id, run_id, event_id, conversation_id = new_id(T0), new_id(T0), new_id(T0), new_id(T0)
    ann = new_id(T0)
    entry = {
        "id": run_id, "agent_id": agent_id, "at": "2026-01-05T09:00:00Z", "kind": "reminder",
        "reminder_id": new_id(T0), "objective": "water the plants", "outcome": "said: done",
        "tokens": 120, "conversation_id": conversation_id,
        "provenance": {"channel": "discord:dm-ann", "participant_ids": [ann], "sensitivity": "private"},
    }  # fmt: skip
    old_entry = {k: v for k, v in entry.items() if k not in ("provenance", "conversation_id")}
    old_run = new_id(T0 - timedelta(days=1))
    old_entry.update(id=old_run, at="2026-01-04T09:00:00+00:00")
    flags = {
        f"activity:{run_id}": json.dumps(entry),
        f"activity:{old_run}": json.dumps(old_entry),  # from before runs carried provenance
        f"activity:{new_id(T0)}": "{not json",
        f"deliberation:{event_id}": json.dumps({"mode": "inline", "decision": {"action": "speak"}}),
        "run:other": "kept",
    }
    try:
        assert _migrate(engine, target=10) == 10
        with engine.begin() as connection:
            for key, value in flags.items():
                connection.execute(
                    insert(schema.flags).values(id=new_id(T0), agent_id=agent_id, key=key, value=value)
                )
        assert _migrate(engine, target=11) == 11
        with engine.connect() as connection:
            found = inspect(connection)
            columns = {
                t: [c["name"] for c in found.get_columns(t)] for t in ("activity_runs", "deliberation_traces")
            }
            left = {row.key for row in connection.execute(text("SELECT key FROM flags"))}
    finally:
        engine.dispose()
    # Both tables are created from the live definitions: if this fails, freeze migration 11 first.
    assert columns == {
        "activity_runs": [
            "id", "agent_id", "run_id", "at", "kind", "reminder_id", "objective", "outcome", "tokens",
            "conversation_id", "channel", "participant_ids", "sensitivity",
        ],
        "deliberation_traces": ["id", "agent_id", "event_id", "trace", "updated_at"],
    }  # fmt: skip
    assert left == {"run:other"}

    store = SQLiteStore(path)
    await store.setup()
    try:
        newest, older = await store.recent_activity(agent_id, limit=10)
        (trace,) = await store.deliberation_traces(agent_id, [event_id])
    finally:
        await store.close()
    assert (newest.id, newest.at, newest.tokens, newest.conversation_id) == (run_id, T0, 120, conversation_id)
    assert newest.provenance == Provenance(
        channel="discord:dm-ann", participant_ids=(ann,), sensitivity=Sensitivity.PRIVATE
    )
    assert (older.id, older.at, older.provenance) == (
        old_run, T0 - timedelta(days=1), Provenance(sensitivity=Sensitivity.PRIVATE),
    )  # fmt: skip
    assert trace.trace == {"mode": "inline", "decision": {"action": "speak"}}


async def test_migration_thirteen_moves_consolidation_and_watermark_flags_into_tables(tmp_path: Path) -> None:
    """An upgraded deployment never consolidates (re-bills) a conversation it already had,
    nor re-reads for the graph or observations what was already read."""
    from persyn.graph.extract import GRAPH_READER
    from persyn.people.observations import OBSERVE_READER
    from persyn.store.ports.jobs import ConsolidationStatus
    from persyn.store.unread import WatermarkReader

    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id, talk, other = new_id(T0), new_id(T0), new_id(T0)
    said = [new_id(T0 + timedelta(seconds=i)) for i in range(2)]
    try:
        assert _migrate(engine, target=12) == 12
        with engine.begin() as connection:
            connection.execute(
                insert(schema.conversations).values(
                    id=talk, agent_id=agent_id, service="terminal", channel="main", kind="dialog",
                    participants=[], started_at=T0, last_activity_at=T0, closed_at=T0,
                )
            )  # fmt: skip
            for number, message_id in enumerate(said):
                connection.execute(
                    insert(schema.messages).values(
                        id=message_id, agent_id=agent_id, conversation_id=talk, role="user",
                        speaker_name="Ann", text=f"remark {number}", created_at=T0 + timedelta(seconds=number),
                    )
                )  # fmt: skip
            for key, value in {
                f"consolidated:{talk}": "stored",
                f"consolidated:{other}": "imported",
                f"graph-seen:{talk}": said[1],
                f"observed-seen:{talk}": said[0],
                "degraded:graph": "{}",
            }.items():
                connection.execute(
                    insert(schema.flags).values(id=new_id(T0), agent_id=agent_id, key=key, value=value)
                )
        assert _migrate(engine, target=13) == 13
        with engine.connect() as connection:
            found = inspect(connection)
            columns = {
                t: [c["name"] for c in found.get_columns(t)]
                for t in ("consolidations", "extraction_watermarks")
            }
            keys = [row.key for row in connection.execute(schema.flags.select())]
    finally:
        engine.dispose()
    # Created from the live definitions: if this fails, freeze migration 13 first.
    assert columns == {
        "consolidations": [
            "agent_id", "conversation_id", "status", "attempts", "next_attempt_at", "last_error", "detail",
            "updated_at",
        ],
        "extraction_watermarks": ["agent_id", "conversation_id", "reader", "message_id", "updated_at"],
    }  # fmt: skip
    assert keys == ["degraded:graph"]  # the moved flags are gone, the others stay

    store = SQLiteStore(path)
    await store.setup()
    try:
        for conversation_id, detail in ((talk, "stored"), (other, "imported")):
            state = await store.get_consolidation(agent_id, conversation_id)
            assert state is not None and (state.status, state.detail) == (ConsolidationStatus.DONE, detail)
        conversation = await store.get_conversation(agent_id, talk)
        assert conversation is not None
        graph = await WatermarkReader(store, GRAPH_READER).unread(agent_id, conversation)
        assert graph.fresh == [] and [m.id for m in graph.context] == said
        observe = await WatermarkReader(store, OBSERVE_READER).unread(agent_id, conversation)
        assert [m.id for m in observe.fresh] == [said[1]]
    finally:
        await store.close()


def test_migration_twelve_creates_the_outbox(engine: Engine) -> None:
    assert _migrate(engine, target=11) == 11
    assert "outbox" not in {name for name, _ in _schema_sql(engine)}
    assert _migrate(engine, target=12) == 12
    with engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("outbox")]
    # Created from the live definition: if this fails, freeze migration 12 first.
    assert columns == [
        "id",
        "agent_id",
        "service",
        "channel",
        "conversation_id",
        "message_id",
        "event_id",
        "text",
        "created_at",
        "delivered_at",
        "attempts",
        "last_error",
    ]


async def test_migration_fourteen_moves_run_and_channel_flags_into_tables(tmp_path: Path) -> None:
    """An upgraded deployment keeps its budgets and its runs' provenance: what a run spent,
    what it may write where, the messages it sent, what caused its conversation and the two
    channel ledgers move out of flags (a value that never parsed is dropped); the flags go."""
    from persyn.core.records import Sensitivity
    from persyn.store.base import Provenance
    from persyn.store.ports.runs import SpendKind

    path = tmp_path / "persyn.db"
    engine = create_sqlite_engine(path, writer=True)
    agent_id, run_id, talk, ann, reminder = (new_id(T0) for _ in range(5))
    provenance = {"channel": "discord:dm-ann", "participant_ids": [ann], "sensitivity": "private"}
    replied = [["2026-01-05T08:00:00+00:00", 40, new_id(T0)], ["2026-01-05T08:30:00+00:00", 2, new_id(T0)]]
    flags = {
        f"spend:{run_id}": json.dumps({"tokens": 1200, "stopped": "stopped: the budget is used"}),
        f"run-provenance:{run_id}": json.dumps(provenance),
        f"sends:{run_id}": json.dumps(["call-1", "call-2"]),
        f"spend:{new_id(T0)}": "{not json",
        f"run:{talk}": json.dumps({"kind": "reminder", "reminder_id": reminder, "sensitivity": "private"}),
        "sent:discord:dm-ann": json.dumps([["2026-01-05T08:45:00+00:00", 25]]),
        "replied:discord:dm-ann": json.dumps(replied),
        "degraded:graph": "{}",
    }
    try:
        assert _migrate(engine, target=13) == 13
        with engine.begin() as connection:
            connection.execute(
                insert(schema.activity_runs).values(
                    id=new_id(T0), agent_id=agent_id, run_id=run_id, at=T0, kind="reminder",
                    reminder_id=reminder, objective="o", outcome="said", tokens=1200, conversation_id=talk,
                    channel="discord:dm-ann", participant_ids=[ann], sensitivity="private",
                )
            )  # fmt: skip
            for key, value in flags.items():
                connection.execute(
                    insert(schema.flags).values(id=new_id(T0), agent_id=agent_id, key=key, value=value)
                )
        assert _migrate(engine, target=14) == 14
        with engine.connect() as connection:
            found = inspect(connection)
            columns = {
                t: [c["name"] for c in found.get_columns(t)]
                for t in ("run_states", "run_conversations", "channel_spend")
            }
            keys = [row.key for row in connection.execute(schema.flags.select())]
    finally:
        engine.dispose()
    # Created from the live definitions: if this fails, freeze migration 14 first.
    assert columns == {
        "run_states": ["agent_id", "run_id", "tokens", "stopped", "provenance", "sends", "updated_at"],
        "run_conversations": [
            "agent_id", "conversation_id", "run_id", "kind", "reminder_id", "sensitivity", "created_at",
        ],
        "channel_spend": ["agent_id", "kind", "service", "channel", "key", "at", "tokens"],
    }  # fmt: skip
    assert keys == ["degraded:graph"]

    store = SQLiteStore(path)
    await store.setup()
    try:
        state = await store.get_run(agent_id, run_id)
        run = await store.get_run_conversation(agent_id, talk)
        since = T0 - timedelta(hours=24)
        sent = await store.channel_spent(agent_id, SpendKind.SENT, "discord", "dm-ann", since)
        said = await store.channel_spent(agent_id, SpendKind.REPLIED, "discord", "dm-ann", since)
        again = await store.spend_channel(
            agent_id, SpendKind.REPLIED, "discord", "dm-ann", replied[0][2], 40, T0, since=since
        )
    finally:
        await store.close()
    assert state is not None
    assert (state.tokens, state.stopped, state.sends) == (
        1200,
        "stopped: the budget is used",
        ("call-1", "call-2"),
    )
    assert state.provenance == Provenance(
        channel="discord:dm-ann", participant_ids=(ann,), sensitivity=Sensitivity.PRIVATE
    )
    assert run is not None and (run.run_id, run.kind, run.reminder_id, run.sensitivity) == (
        run_id, "reminder", reminder, Sensitivity.PRIVATE,
    )  # fmt: skip
    assert (sent, said) == (25, 42)
    assert again.recorded and again.used == 42  # a migrated reply is the same reply: counted once


def test_migration_fifteen_creates_the_web_keys(engine: Engine) -> None:
    assert _migrate(engine, target=14) == 14
    assert "web_keys" not in {name for name, _ in _schema_sql(engine)}
    assert _migrate(engine, target=15) == 15
    with engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("web_keys")]
    # Created from the live definition: if this fails, freeze migration 15 first.
    assert columns == ["id", "name", "key_hash", "contact_id", "operator", "created_at", "revoked_at"]


def test_migrations_seventeen_and_eighteen_create_the_guardrail_and_emotion_tables(engine: Engine) -> None:
    assert _migrate(engine, target=16) == 16
    before = {name for name, _ in _schema_sql(engine)}
    assert not before & {"guardrail_events", "guardrail_checks", "emotion_readings"}
    assert _migrate(engine, target=18) == 18
    with engine.connect() as connection:
        found = {
            table: [c["name"] for c in inspect(connection).get_columns(table)]
            for table in ("guardrail_events", "guardrail_checks", "emotion_readings")
        }
    # Created from the live definitions: if this fails, freeze migrations 17 and 18 first.
    assert found == {
        "guardrail_events": [
            "id", "agent_id", "guardrail", "subject_kind", "subject", "person_id", "service", "channel",
            "conversation_id", "reason", "score", "actions", "detected_at", "blocked_until", "lifted_at",
        ],
        "guardrail_checks": ["id", "agent_id", "guardrail", "subject", "window_end", "checked_at", "tokens"],
        "emotion_readings": [
            "id", "agent_id", "created_at", "conversation_id", "event_id", "record_id", "distribution", "top",
        ],
    }  # fmt: skip


def test_migration_twenty_creates_the_model_call_checkpoints(engine: Engine) -> None:
    assert _migrate(engine, target=15) == 15
    assert "model_calls" not in {name for name, _ in _schema_sql(engine)}
    assert _migrate(engine, target=20) == 20
    with engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("model_calls")]
    # Created from the live definition: if this fails, freeze migration 20 first.
    assert columns == ["call_key", "workflow_id", "response", "created_at"]


def test_migration_twenty_four_creates_the_leases(engine: Engine) -> None:
    assert _migrate(engine, target=23) == 23
    assert "leases" not in {name for name, _ in _schema_sql(engine)}
    assert _migrate(engine, target=24) == 24
    with engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("leases")]
        key = inspect(connection).get_pk_constraint("leases")["constrained_columns"]
    # Created from the live definition: if this fails, freeze migration 24 first.
    assert (columns, key) == (["name", "holder", "acquired_at", "expires_at"], ["name"])


def test_migration_twenty_five_gives_old_events_no_attachments(engine: Engine) -> None:
    assert _migrate(engine, target=24) == 24
    at = datetime(2026, 1, 5, tzinfo=UTC)
    row = {
        "id": new_id(at),
        "agent_id": new_id(at),
        "kind": "message",
        "service": "web",
        "channel": "k",
        "speaker": None,
        "text": "before",
        "received_at": at,
        "addressed": True,
        "meta": {},
    }
    columns = ", ".join(row)
    with engine.begin() as connection:
        connection.execute(
            text(f"INSERT INTO events ({columns}) VALUES ({', '.join(':' + c for c in row)})"),
            {**row, "speaker": None, "meta": "{}", "received_at": at.isoformat()},
        )
    assert _migrate(engine, target=25) == 25
    with engine.connect() as connection:
        kept = connection.execute(text("SELECT attachments FROM events")).scalar_one()
    assert json.loads(kept) == []
