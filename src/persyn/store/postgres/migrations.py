"""PostgreSQL's own steps of the schema migrations (`store/schema/migrations.py`; ARCHITECTURE
§7.2), handed to the runner as `POSTGRES_MIGRATIONS` with the advisory lock that serialises
migrators. A step in portable SQLAlchemy Core lives with the schema and runs as is; one that
SQLite writes in its own DDL (FTS5, vec0, table rebuilds) has its PostgreSQL form here. No
PostgreSQL database ever held a schema older than the one these build (the PostgreSQL backend
arrived at version 14), so these steps create structure and move no legacy data.

Full-text search is a stored, generated `tsvector` column with a GIN index, in the
`persyn_text` configuration: English stemming, as FTS5's porter tokenizer. (FTS5 also folds
diacritics; PostgreSQL needs the `unaccent` extension for that, which pgserver's build lacks,
so "cafe" does not find "café" on PostgreSQL.) Vectors (pgvector) live in one table per dimension,
created when the first vector of that size arrives (`vectors.py`).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

from persyn.store.postgres.engine import TEXT_CONFIG
from persyn.store.postgres.keyword_index import create_keyword_index
from persyn.store.schema import tables as schema
from persyn.store.schema.migrations import PROVENANCE_COLUMNS, DialectMigrations

__all__ = ["POSTGRES_MIGRATIONS"]

# Arbitrary constant naming "Persyn schema migrations" among PostgreSQL advisory locks.
_MIGRATION_LOCK = 0x7065_7273_796E

# A configuration of our own (a copy of `english` today), so that a later migration can
# change how text is split (add `unaccent` where the server has it) without touching queries.
_TEXT_SEARCH = (f"CREATE TEXT SEARCH CONFIGURATION {TEXT_CONFIG} (COPY = pg_catalog.english)",)

_MESSAGE_SEARCH = (
    f"ALTER TABLE messages ADD COLUMN text_tsv tsvector "
    f"GENERATED ALWAYS AS (to_tsvector('{TEXT_CONFIG}', text)) STORED",
    "CREATE INDEX ix_messages_text_tsv ON messages USING gin (text_tsv)",
)

# Summary weighted B, tags A: a tag is a deliberate topic label (SQLite's bm25 weights 1, 2).
_MEMORY_SEARCH = (
    "ALTER TABLE memory_records ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS ("
    f"setweight(to_tsvector('{TEXT_CONFIG}', summary), 'B') || "
    f"setweight(to_tsvector('{TEXT_CONFIG}', tags::text), 'A')) STORED",
    "CREATE INDEX ix_memory_records_search_tsv ON memory_records USING gin (search_tsv)",
)


def message_search(connection: Connection, dialect_name: str) -> None:
    """Migration 2 on PostgreSQL: the text configuration and the messages' tsvector."""
    for statement in (*_TEXT_SEARCH, *_MESSAGE_SEARCH):
        connection.exec_driver_sql(statement)


def memory_records(connection: Connection, dialect_name: str) -> None:
    """Migration 3 on PostgreSQL: memory records and their tsvector. pgvector itself is
    enabled here, so a database without it fails at migration, not at the first vector."""
    schema.memory_records.create(connection, checkfirst=False)
    for statement in _MEMORY_SEARCH:
        connection.exec_driver_sql(statement)
    connection.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")


def nothing(connection: Connection, dialect_name: str) -> None:
    """A step with nothing to do on PostgreSQL (migration 4 re-laid sqlite-vec tables;
    migration 16 codes vectors for sub-linear search, which pgvector's HNSW index gives;
    migration 23 bounds common words with FTS5's vocabulary, which the posting lists count)."""


def provenance(connection: Connection, dialect_name: str) -> None:
    """Migration 10 on PostgreSQL: the provenance columns, and quick facts with their new
    unique key (the tables are empty here: nothing to carry over)."""
    for table in ("goals", "reminders"):
        for statement in PROVENANCE_COLUMNS:
            connection.exec_driver_sql(statement.format(table=table))
    connection.exec_driver_sql("DROP TABLE quick_facts")
    schema.quick_facts.create(connection, checkfirst=False)


def _lock(connection: Connection) -> None:
    """Serialise migrators: a transaction-scoped advisory lock, taken in each migration's
    transaction before it re-reads the version."""
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})


POSTGRES_MIGRATIONS = DialectMigrations(
    "postgresql",
    {
        2: message_search,
        3: memory_records,
        4: nothing,
        10: provenance,
        16: nothing,
        22: create_keyword_index,
        23: nothing,
    },
    lock=_lock,
)
