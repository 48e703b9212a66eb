"""The PostgreSQL backend (ARCHITECTURE §7.2): `storage_url = "postgresql://…"`, for a
deployment that outgrows one machine; SQLite stays the embedded default.

One schema, two backends. The tables are `schema/`'s and most statements are the shared SQL
of `sql/` (portable SQLAlchemy Core: ON CONFLICT through `sql/dml.insert`, the graph's
recursive CTEs, the access rules' SQL form), composed in `SqlStore` as SQLite's are. What
differs has its own part here: full-text search on `tsvector` + GIN (`dialog.py`,
`memory.py`, `keyword_index.py`), vectors on pgvector with HNSW (`vectors.py`), engines
(`engine.py`) and the migrations' PostgreSQL variants (`migrations.py`).

Concurrency model: the same as SQLite's, across hosts.
- Every write transaction first takes one transaction-scoped advisory lock
  (`pg_advisory_xact_lock`, `engine.WRITE_LOCK`): PostgreSQL's counterpart of
  SQLite's BEGIN IMMEDIATE. Writers of every process and host run one at a time, and each
  statement of a write (READ COMMITTED) sees every earlier commit. That is what keeps the
  read-then-write sequences the parts share with SQLite correct without rewriting them:
  the graph upsert (look up an entity by key, insert it if missing:
  `sql/graph_write.upsert_graph_rows`), extraction watermarks and consolidation state
  (`sql/jobs`), contact merges (`sql/persons.merge_persons`: move addresses,
  participants, records, graph rows), conversation open-or-join (`sql/dialog`), run
  state and channel ledgers (`sql/runs`). Single-statement upserts (flags, markers,
  outbox, memory inserts) are INSERT … ON CONFLICT and would be safe without the lock.
  Writes are short (one turn's rows), so one lock costs little beside a turn's model call;
  a finer lock per agent is the next step if contention shows in `bench/dispatch.py`.
- In this process every write runs on one thread over one connection (as on SQLite), so
  the lock is never contended from inside a process.
- Reads run on a small pool, each batch in one REPEATABLE READ, READ ONLY transaction: one
  snapshot, as SQLite's WAL readers get.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from persyn.core.errors import StoreError
from persyn.store.postgres import keyword_index as keyword
from persyn.store.postgres import vectors as vectors
from persyn.store.postgres.dialog import PostgresDialog
from persyn.store.postgres.engine import create_postgres_engine, driver_url, redacted, server_settings
from persyn.store.postgres.memory import PostgresMemory
from persyn.store.postgres.migrations import POSTGRES_MIGRATIONS
from persyn.store.schema import migrations
from persyn.store.sql.store import SqlStore

__all__ = ["PostgresProbe", "PostgresStore", "probe"]


class PostgresStore(PostgresDialog, PostgresMemory, SqlStore):
    """`Store` over one PostgreSQL database. Construct cheaply; `await setup()` before use.

    The shared parts of `SqlStore` with the PostgreSQL parts in front (search and vectors)
    and PostgreSQL engines underneath."""

    def __init__(self, url: URL, *, readers: int = 4) -> None:
        self._url = url
        self._writer = create_postgres_engine(url, writer=True, pool_size=1)
        self._reader = create_postgres_engine(url, writer=False, pool_size=readers)
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="persyn-pg-write")
        self._read_threads = ThreadPoolExecutor(readers, thread_name_prefix="persyn-pg-read")
        self._closed = False
        self._pending_reads = {}
        self._bulk = None

    @property
    def url(self) -> str:
        """The database, without its password."""
        return redacted(self._url)

    def _label(self) -> str:
        return redacted(self._url)

    async def setup(self) -> None:
        if self._closed:
            raise StoreError(f"setup: the store for {self._label()!r} is closed")
        await asyncio.get_running_loop().run_in_executor(self._write_thread, self._migrate_sync)

    def _migrate_sync(self) -> None:
        try:
            with self._writer.connect() as connection:
                migrations.migrate(connection, POSTGRES_MIGRATIONS)
            # A bulk load killed half way left a vector table without its HNSW index.
            vectors.restore_indexes(self._url)
            # Writes made while the keyword triggers were off missed the posting lists.
            with self._writer.begin() as connection:
                keyword.repair_keyword_lists(connection)
        except SQLAlchemyError as exc:
            raise StoreError(f"migrating {self._label()!r} failed: {exc}") from exc


@dataclass(frozen=True)
class PostgresProbe:
    """What `persyn doctor` reports about a PostgreSQL store, read without changing it.
    `error` is set (and the rest empty) when the server could not be reached."""

    url: str
    error: str | None = None
    server_version: str | None = None
    vector_installed: str | None = None  # pgvector's version in this database
    vector_available: str | None = None  # pgvector's version the server could install
    schema_version: int = 0
    latest_version: int = migrations.LATEST_VERSION
    # Vector sizes whose table lacks its HNSW index: a bulk load under way or interrupted.
    missing_vector_indexes: tuple[int, ...] = ()
    keyword_problem: str | None = None  # what is wrong with the keyword posting lists


def probe(url: str, *, timeout_seconds: int = 5) -> PostgresProbe:
    """Connect once (read only) and read the server's and pgvector's versions and the
    applied migrations."""
    parsed = make_url(url)
    shown = redacted(parsed)
    engine = create_engine(
        driver_url(parsed), poolclass=NullPool, connect_args={"connect_timeout": timeout_seconds}
    )
    try:
        with engine.connect() as connection:
            found = server_settings(connection)
            version = migrations.current_version(connection)
            missing = tuple(vectors.missing_indexes(connection))
            keyword_problem = keyword.keyword_lists_problem(connection)
    except SQLAlchemyError as exc:
        return PostgresProbe(
            shown, error=str(exc.orig or exc).strip() if isinstance(exc, DBAPIError) else str(exc)
        )
    finally:
        engine.dispose()
    return PostgresProbe(
        shown,
        server_version=str(found["server_version"]),
        vector_installed=found["vector"],
        vector_available=found["vector_available"],
        schema_version=version,
        missing_vector_indexes=missing,
        keyword_problem=keyword_problem,
    )
