"""The SQLite backend (ARCHITECTURE §4): the default store, one file per installation.

Concurrency model. SQLite allows one writer at a time per database file, so:
- inside this process every write runs on ONE thread (a single-worker executor) over ONE
  connection, so SQLite never sees two writers from here;
- between processes, every write transaction starts with BEGIN IMMEDIATE, which takes the
  write lock up front; a second process waits for it (busy_timeout) instead of failing later
  with "database is locked" when a read transaction tries to upgrade itself;
- reads run on a small thread pool of `query_only` connections; WAL lets them proceed while
  a write is in progress, each inside one (deferred) transaction so it sees one snapshot.
Async methods hand the blocking work to those threads; the event loop never touches SQLite.
A cancelled caller does not cancel the work: a write that has started still commits.

Where the rest lives: how work reaches those threads, and every part of `Store` both
backends share, in `sql/` (`sql/work.py`, `sql/store.py`: one part per sub-port and the
operations that span parts in one transaction); engines, the DB-API driver (pysqlite3, for
sqlite-vec) and pragmas in `engine.py`; what SQLite does its own way beside it: dialog
search on FTS5 (`dialog.py`), long-term memory's keyword search (`keyword_index.py`,
`keyword_bound.py`) and vectors (`vectors.py`, `ann.py`) behind `memory.py`. This module
keeps the engines and the lifecycle.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from persyn.core.errors import StoreError
from persyn.store.schema import migrations
from persyn.store.sql.store import SqlStore
from persyn.store.sqlite.dialog import SQLiteDialog, fts_query
from persyn.store.sqlite.engine import create_sqlite_engine
from persyn.store.sqlite.memory import SQLiteMemory
from persyn.store.sqlite.migrations import SQLITE_MIGRATIONS

__all__ = ["SQLiteStore", "create_sqlite_engine", "fts_query"]


class SQLiteStore(SQLiteDialog, SQLiteMemory, SqlStore):
    """`Store` over one SQLite file. Construct cheaply; `await setup()` before use."""

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 30_000, readers: int = 4
    ) -> None:
        self._path = Path(path)
        self._writer = create_sqlite_engine(self._path, writer=True, busy_timeout_ms=busy_timeout_ms)
        self._reader = create_sqlite_engine(
            self._path, writer=False, pool_size=readers, busy_timeout_ms=busy_timeout_ms
        )
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="persyn-sqlite-write")
        self._read_threads = ThreadPoolExecutor(readers, thread_name_prefix="persyn-sqlite-read")
        self._closed = False
        self._pending_reads = {}

    @property
    def path(self) -> Path:
        return self._path

    def _label(self) -> str:
        return str(self._path)

    # lifecycle -------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create or migrate the schema on the write thread; see `migrations.migrate`."""
        if self._closed:
            raise StoreError(f"setup: the store for {str(self._path)!r} is closed")
        await asyncio.get_running_loop().run_in_executor(self._write_thread, self._migrate_sync)

    def _migrate_sync(self) -> None:
        try:
            with self._writer.connect() as connection:
                migrations.migrate(connection, SQLITE_MIGRATIONS)
        except SQLAlchemyError as exc:
            raise StoreError(f"migrating {str(self._path)!r} failed: {exc}") from exc
