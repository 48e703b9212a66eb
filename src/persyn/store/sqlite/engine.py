"""SQLite engines for the store: the DB-API driver, sqlite-vec, pragmas and transactions.

The driver. Vectors live in sqlite-vec's `vec0` virtual tables, so every connection must
load the sqlite-vec extension. Many Python builds (this project's among them) compile the
standard `sqlite3` module without extension loading, so the store prefers `pysqlite3`
(the `pysqlite3-binary` wheel bundles a recent SQLite that can load extensions) and falls
back to the standard module only where that one can load extensions. Anything else is a
StoreError naming the fix. SQLite must be at least 3.38: vec0 filters a kNN search by a SET
of channels through `sqlite3_vtab_in`, which arrived then.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import QueuePool

from persyn.core.errors import StoreError

__all__ = ["MIN_SQLITE_VERSION", "create_sqlite_engine", "enable_wal", "sqlite_dbapi"]

MIN_SQLITE_VERSION = (3, 38, 0)

# Read connections map the database file (its first 4 GiB) and read pages in place instead
# of copying each one from the OS cache into their own small page cache: keyword search at 1M
# records (FTS5 reads ~54k doclist entries and docsize rows per query) takes 3-5 ms less CPU.
# What it costs: address space only (each reader maps the file; a 32-bit process keeps read(),
# as SQLite does when a map fails), a resident size that counts the OS cache pages a process
# touched, and an I/O error on a mapped page is a signal instead of a StoreError. Writes never
# go through the map, and WAL readers still read newer pages from the WAL (SQLite, mmap.html).
_READER_MMAP_BYTES = 2**32 if sys.maxsize > 2**32 else 0

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6

_FIX = (
    "install the 'pysqlite3-binary' package (a SQLite that can load extensions) and "
    "'sqlite-vec', e.g. `uv sync`"
)


def sqlite_dbapi() -> ModuleType:
    """The DB-API module the store talks to SQLite through: `pysqlite3.dbapi2` if it is
    installed, else the standard `sqlite3` if it can load extensions; else StoreError."""
    try:
        module = importlib.import_module("pysqlite3.dbapi2")
    except ImportError:
        module = importlib.import_module("sqlite3")
        if not _can_load_extensions(module):
            raise StoreError(
                "the SQLite store needs a SQLite that can load extensions (for sqlite-vec), but "
                "'pysqlite3' is not installed and this Python's sqlite3 module was built without "
                f"extension loading; {_FIX}"
            ) from None
    version: tuple[int, ...] = tuple(module.sqlite_version_info)
    if version < MIN_SQLITE_VERSION:
        raise StoreError(
            f"the SQLite store needs SQLite >= {'.'.join(map(str, MIN_SQLITE_VERSION))}, but "
            f"{module.__name__} uses {module.sqlite_version}; {_FIX}"
        )
    return module


def _can_load_extensions(module: ModuleType) -> bool:
    connection = module.connect(":memory:")
    try:
        return hasattr(connection, "enable_load_extension")
    finally:
        connection.close()


def _sqlite_vec_path() -> str:
    """sqlite-vec's loadable extension (`vec0` in its package), found without importing the
    package: its `__init__` imports numpy (a third of a second) for helpers the store never
    uses, and every command that opens the store would pay for it."""
    spec = importlib.util.find_spec("sqlite_vec")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise StoreError(f"the SQLite store needs the 'sqlite-vec' package; {_FIX}")
    return str(Path(locations[0]) / "vec0")


def _load_sqlite_vec(dbapi_connection: Any) -> None:
    dbapi_connection.enable_load_extension(True)
    try:
        dbapi_connection.load_extension(_sqlite_vec_path())
    finally:
        dbapi_connection.enable_load_extension(False)


def _json_serializer(value: object) -> str:
    """JSON columns hold readable text: FTS5 indexes the stored tags, so a non-ASCII tag
    must not turn into `\\u00e9` escapes."""
    return json.dumps(value, ensure_ascii=False)


def create_sqlite_engine(
    path: Path, *, writer: bool, pool_size: int = 1, busy_timeout_ms: int = 30_000
) -> Engine:
    """An engine whose connections carry sqlite-vec and our pragmas, and whose
    transactions we begin ourselves: the sqlite3 module's own implicit BEGIN is deferred and
    skips SELECTs. A `writer` engine begins IMMEDIATE (takes the write lock first) and owns
    WAL mode; a reader engine's connections are `query_only` and memory-map the file
    (`_READER_MMAP_BYTES`). Callers dispose() it."""
    dbapi = sqlite_dbapi()
    engine = create_engine(
        URL.create("sqlite", database=str(path)),
        module=dbapi,
        poolclass=QueuePool,
        pool_size=pool_size,
        max_overflow=0,
        json_serializer=_json_serializer,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
    )
    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: object) -> None:  # pyright: ignore[reportUnusedFunction]
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        _load_sqlite_vec(dbapi_connection)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA synchronous = NORMAL")
            if writer:
                enable_wal(dbapi, cursor, busy_timeout_ms / 1000)
            else:
                cursor.execute("PRAGMA query_only = ON")  # a read connection can never write
                cursor.execute(f"PRAGMA mmap_size = {_READER_MMAP_BYTES}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:  # pyright: ignore[reportUnusedFunction]
        # On the driver's connection, not through `exec_driver_sql`: SQLAlchemy's execution
        # context around one BEGIN cost more than the rest of a short transaction (about
        # 0.1 ms of CPU, paid by every store call). The commit or rollback SQLAlchemy sends
        # ends it as before.
        driver = connection.connection.driver_connection
        assert driver is not None  # a connection in use always has one
        driver.execute(begin)

    return engine


def enable_wal(dbapi: ModuleType, cursor: Any, timeout_seconds: float) -> None:
    """Switch the file to WAL (persistent; a no-op once set). The first switch needs an
    exclusive lock and SQLite reports BUSY at once instead of calling the busy handler, so
    two processes opening a fresh file together would fail: retry until the busy timeout."""
    deadline = time.monotonic() + timeout_seconds
    pause = 0.005
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except dbapi.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise dbapi.OperationalError("could not switch the database to WAL journal mode")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _is_busy(exc: Exception) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED. The standard module (3.11+) carries the error code;
    pysqlite3 does not, so fall back to SQLite's fixed messages for those two codes."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    message = str(exc).lower()
    return "database is locked" in message or "database table is locked" in message
