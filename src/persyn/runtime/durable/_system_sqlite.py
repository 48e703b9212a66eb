"""The engine for DBOS's embedded SQLite system database (ARCHITECTURE §3).

DBOS builds its own SQLite engine in the default rollback-journal mode with
`synchronous = FULL`: every commit then syncs the database and its journal, and a write
blocks every reader. An activation commits about ten times to the system database (enqueue,
claim, workflow start, each step's start and result, the outcome), so that engine, not
Persyn, set the dispatch rate. This one keeps what DBOS's connect hook sets (pysqlite's
implicit BEGIN IMMEDIATE before a write, a generous busy timeout, foreign keys) and adds
WAL (readers never wait for the writer; a commit appends to one file) with
`synchronous = NORMAL` — in WAL mode that is still durable against a process crash, and loses
at most the last commits on a power cut, never consistency (the same setting as the store's
own file). It drops `pool_pre_ping`, which for a local file is one wasted query per checkout.

Writers take turns in-process. SQLite lets one connection write at a time; a second one
that finds the lock taken does not queue but sleeps in SQLite's busy handler, backing off
1, 2, 5, 10 ... 100 ms between tries. With a dozen activations in flight most of DBOS's
write transactions found the lock held, and the bench measured 27 ms on average (up to
1.5 s) just to begin one. So every connection of this engine waits for a process-wide turn
before its first write statement (the one pysqlite prefixes with BEGIN IMMEDIATE) and hands
it on when the transaction ends: in-process writers queue on a lock that wakes the next one
as soon as it is free. Other processes still meet through SQLite's own lock and busy timeout.

Postgres system databases are left to DBOS.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import QueuePool

from persyn.store.sqlite.engine import enable_wal

__all__ = ["dbos_sqlite_engine"]

_POOL_SIZE = 20  # DBOS's own default for its system database pool
_BUSY_TIMEOUT_MS = 30_000


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class _TurnTakingConnection(sqlite3.Connection):
    """A connection that holds the engine's write turn from its first write statement
    until its transaction ends (commit, rollback or close)."""

    write_turn: threading.Lock
    holds_turn: bool = False

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or _TurnTakingCursor)

    def before_statement(self, sql: str) -> None:
        # pysqlite opens a transaction (BEGIN IMMEDIATE here) before exactly these statements.
        if self.holds_turn or self.in_transaction or not sql.lstrip()[:7].upper().startswith(_WRITES):
            return
        # Bounded like the busy timeout: should anything ever wait on itself, it falls
        # back to SQLite's own locking instead of hanging.
        self.holds_turn = self.write_turn.acquire(timeout=_BUSY_TIMEOUT_MS / 1000)

    def after_transaction(self) -> None:
        if self.holds_turn and not self.in_transaction:
            self.holds_turn = False
            self.write_turn.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.after_transaction()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.after_transaction()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.holds_turn:
                self.holds_turn = False
                self.write_turn.release()


class _TurnTakingCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        self._connection().before_statement(sql)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> Any:
        self._connection().before_statement(sql)
        return super().executemany(sql, seq_of_parameters)

    def _connection(self) -> _TurnTakingConnection:
        connection = self.connection
        assert isinstance(connection, _TurnTakingConnection)
        return connection


def dbos_sqlite_engine(url: str) -> Engine | None:
    """An engine for the DBOS system database at `url`, or None when it is not SQLite
    (DBOS then builds its own). The caller disposes of it after DBOS is destroyed."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    engine = create_engine(
        parsed,
        poolclass=QueuePool,
        pool_size=_POOL_SIZE,
        max_overflow=0,
        pool_timeout=30,
        pool_use_lifo=True,
        connect_args={
            "check_same_thread": False,
            "timeout": _BUSY_TIMEOUT_MS / 1000,
            "factory": _TurnTakingConnection,
        },
    )
    write_turn = threading.Lock()

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: object) -> None:  # pyright: ignore[reportUnusedFunction]
        # As DBOS's own hook: pysqlite opens BEGIN IMMEDIATE before a write, so writers
        # serialise on the lock up front instead of failing to upgrade mid-transaction.
        dbapi_connection.isolation_level = "IMMEDIATE"
        dbapi_connection.write_turn = write_turn
        dbapi_connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        dbapi_connection.execute("PRAGMA foreign_keys = ON")
        cursor = dbapi_connection.cursor()
        try:
            enable_wal(sqlite3, cursor, _BUSY_TIMEOUT_MS / 1000)
        finally:
            cursor.close()
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    return engine
