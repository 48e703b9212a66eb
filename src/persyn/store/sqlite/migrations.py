"""SQLite's own steps of the schema migrations (`store/schema/migrations.py`): the ones written
in SQLite's DDL (FTS5 indexes with their triggers, sqlite-vec's vec0 tables, a table rebuilt
where SQLite alters no constraint, fts5vocab), handed to the runner as `SQLITE_MIGRATIONS`.
Every other step is portable and lives with the schema. Released steps never change: a
database made by an old version migrates the same way (`tests/unit/store/test_migrations.py`).
"""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.engine import Connection

from persyn.store.schema import tables as schema
from persyn.store.schema.migrations import (
    PROVENANCE_COLUMNS,
    UNATTRIBUTED,
    DialectMigrations,
    attribute_legacy_reminders,
)
from persyn.store.sqlite import ann

__all__ = ["SQLITE_MIGRATIONS"]


# External-content FTS5 (content='messages'): the text lives once, in `messages`, and the
# index only stores tokens. A contentless table (content='') would need SQLite >= 3.43
# (contentless_delete) to support deleting or editing a message, and cannot return the text
# for snippet()/highlight(); external content supports both on the SQLite we ship with.
# The index is keyed by `messages.rowid`. SQLite does not promise that VACUUM keeps the
# rowids of a table without INTEGER PRIMARY KEY (in practice it does); after a VACUUM, run
# INSERT INTO messages_fts(messages_fts) VALUES('rebuild') to be certain. The store never
# runs VACUUM itself. Porter stemming makes "walked" find "walking", as tsvector will on
# PostgreSQL.
_SQLITE_FTS = (
    """
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        text,
        content='messages',
        content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, text) VALUES (new.rowid, new.text);
    END
    """,
    """
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    END
    """,
    """
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
        INSERT INTO messages_fts(rowid, text) VALUES (new.rowid, new.text);
    END
    """,
    # Messages stored before this migration ran.
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
)


def message_search(connection: Connection, dialect_name: str) -> None:
    """Migration 2: full-text search over messages.text."""
    for statement in _SQLITE_FTS:
        connection.exec_driver_sql(statement)


# Long-term memory. Keyword search is external-content FTS5 over (summary, tags) keyed by
# `memory_records.rowid`, kept in step by triggers (the VACUUM note above applies here too:
# rebuild with INSERT INTO memory_fts(memory_fts) VALUES('rebuild')). `tags` is indexed as its
# stored JSON text; the tokenizer treats brackets, quotes and commas as separators. Porter
# stemming lets "hiking" find "hiked". Vectors are not created here: sqlite-vec tables are
# per dimension and appear when the first vector of that size is stored (`vectors.py`).
_SQLITE_MEMORY_FTS = (
    """
    CREATE VIRTUAL TABLE memory_fts USING fts5(
        summary,
        tags,
        content='memory_records',
        content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_records BEGIN
        INSERT INTO memory_fts(rowid, summary, tags) VALUES (new.rowid, new.summary, new.tags);
    END
    """,
    """
    CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_records BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, summary, tags)
        VALUES ('delete', old.rowid, old.summary, old.tags);
    END
    """,
    """
    CREATE TRIGGER memory_fts_update AFTER UPDATE OF summary, tags ON memory_records BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, summary, tags)
        VALUES ('delete', old.rowid, old.summary, old.tags);
        INSERT INTO memory_fts(rowid, summary, tags) VALUES (new.rowid, new.summary, new.tags);
    END
    """,
)


def memory_records(connection: Connection, dialect_name: str) -> None:
    """Migration 3: long-term memory records and their keyword index."""
    schema.memory_records.create(connection, checkfirst=False)
    for statement in _SQLITE_MEMORY_FTS:
        connection.exec_driver_sql(statement)


# Migration 4: record vectors partitioned by channel as well as by agent (see
# `vectors.py` for why). vec0 cannot alter a table, so each `memory_vec_<dims>` table
# of migration 3's layout (agent partition; channel and model as metadata columns) is copied
# into a `memory_vectors_<dims>` table of this layout, frozen here, and dropped.
_V3_VECTOR_TABLE = re.compile(r"memory_vec_([0-9]+)")
_V4_VECTOR_DDL = (
    "CREATE VIRTUAL TABLE memory_vectors_{dims} USING vec0("
    "record_id text primary key, "
    "agent_id text partition key, "
    "channel text partition key, "
    "embedding float[{dims}] distance_metric=cosine, "
    "+embedding_model text, "
    "chunk_size=256)"
)


def vectors_by_channel(connection: Connection, dialect_name: str) -> None:
    """Migration 4: move every vector into a table partitioned by (agent, channel)."""
    names = connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars()
    for old in sorted(str(name) for name in names):
        match = _V3_VECTOR_TABLE.fullmatch(old)  # not the vec0 shadow tables (..._chunks)
        if match is None:
            continue
        dims = int(match.group(1))
        connection.exec_driver_sql(_V4_VECTOR_DDL.format(dims=dims))
        connection.exec_driver_sql(
            f"INSERT INTO memory_vectors_{dims}(record_id, agent_id, channel, embedding, embedding_model) "
            f"SELECT record_id, agent_id, channel, embedding, embedding_model FROM {old}"
        )
        connection.exec_driver_sql(f"DROP TABLE {old}")


def provenance(connection: Connection, dialect_name: str) -> None:
    """Migration 10: provenance for quick facts (kept per scope from now on), goals and
    reminders (existing rows: `migrations.attribute_legacy_reminders`, `UNATTRIBUTED`)."""
    for table in ("goals", "reminders"):
        for statement in PROVENANCE_COLUMNS:
            connection.exec_driver_sql(statement.format(table=table))
    attribute_legacy_reminders(connection)
    # A new unique key (agent, subject, key, scope): SQLite alters no constraint, so copy.
    connection.exec_driver_sql("ALTER TABLE quick_facts RENAME TO quick_facts_v5")
    schema.quick_facts.create(connection, checkfirst=False)
    unattributed = schema.provenance_values(UNATTRIBUTED)
    connection.exec_driver_sql(
        "INSERT INTO quick_facts (id, agent_id, subject_id, key, value, updated_at, channel, "
        "participant_ids, sensitivity, scope) SELECT id, agent_id, subject_id, key, value, updated_at, "
        "NULL, ?, ?, ? FROM quick_facts_v5",
        ("[]", unattributed["sensitivity"], UNATTRIBUTED.scope),
    )
    connection.exec_driver_sql("DROP TABLE quick_facts_v5")


_VECTOR_TABLE = re.compile(r"memory_vectors_([0-9]+)")


def vector_codes(connection: Connection, dialect_name: str) -> None:
    """Migration 16: binary codes for sub-linear search in large compartments
    (`ann.py`), backfilled from every vector already stored."""
    names = connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars()
    tables = sorted(name for name in names if _VECTOR_TABLE.fullmatch(name))
    ann.create_tables(connection)
    ann.backfill(connection, tables)


def keyword_postings(connection: Connection, dialect_name: str) -> None:
    """Migration 22: nothing on SQLite, whose FTS5 index keeps its own postings (PostgreSQL
    builds block posting lists for BM25 here)."""


def keyword_vocabulary(connection: Connection, dialect_name: str) -> None:
    """Migration 23: `memory_fts_vocab`, memory_fts's vocabulary with each token's row count,
    read by keyword search to bound the words found in most records (`keyword_bound.py`). A
    virtual table over the index: it stores nothing."""
    connection.execute(text("CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab(memory_fts, row)"))


SQLITE_MIGRATIONS = DialectMigrations(
    "sqlite",
    {
        2: message_search,
        3: memory_records,
        4: vectors_by_channel,
        10: provenance,
        16: vector_codes,
        22: keyword_postings,
        23: keyword_vocabulary,
    },
)
