"""How the SQLite store's parts run their work: on the single writer thread or the reader
pool, each call in one transaction (see `sqlite.py` for the concurrency model), plus the
statement-building helpers the parts share.

Every `_sqlite_<concern>.py` part derives from `SQLiteWork`; `SQLiteStore` composes the parts
and owns the engines and threads this class uses.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, bindparam, case
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.expression import Executable

from persyn.core.errors import StoreError

__all__ = ["SQLiteWork", "latest", "p", "upsert"]

T = TypeVar("T")


class SQLiteWork:
    """Runs blocking work off the event loop, one transaction per call."""

    _path: Path
    _writer: Engine
    _reader: Engine
    _write_thread: ThreadPoolExecutor
    _read_threads: ThreadPoolExecutor
    _closed: bool

    async def _write(self, what: str, work: Callable[[Connection], T]) -> T:
        return await self._run(self._write_thread, self._writer, what, work)

    async def _read(self, what: str, work: Callable[[Connection], T]) -> T:
        return await self._run(self._read_threads, self._reader, what, work)

    async def _run(
        self, threads: ThreadPoolExecutor, engine: Engine, what: str, work: Callable[[Connection], T]
    ) -> T:
        if self._closed:
            raise StoreError(f"{what}: the store for {str(self._path)!r} is closed")
        job = functools.partial(self._in_transaction, engine, what, work)
        return await asyncio.get_running_loop().run_in_executor(threads, job)

    async def _fetch_one(
        self,
        what: str,
        statement: Executable,
        to_row: Callable[[Row[Any]], T],
        params: dict[str, Any] | None = None,
    ) -> T | None:
        def work(connection: Connection) -> T | None:
            row = connection.execute(statement, params).first()
            return None if row is None else to_row(row)

        return await self._read(what, work)

    async def _fetch_all(
        self,
        what: str,
        statement: Executable,
        to_row: Callable[[Row[Any]], T],
        params: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> list[T]:
        run = self._write if write else self._read
        return await run(what, lambda c: [to_row(row) for row in c.execute(statement, params)])

    def _in_transaction(self, engine: Engine, what: str, work: Callable[[Connection], T]) -> T:
        try:
            with engine.begin() as connection:
                return work(connection)
        except SQLAlchemyError as exc:
            raise StoreError(f"{what} failed on {str(self._path)!r}: {exc}") from exc


# The statements every turn runs are built once, at import. A statement object reused with
# parameters skips both building the expression and SQLAlchemy's cache-key walk (memoised per
# object); together those were most of a turn's store CPU. Parameters are named `p_*` so they
# never collide with the column names SQLAlchemy reserves for VALUES and SET.
def p(name: str, like: Any = None) -> Any:
    return bindparam(f"p_{name}", type_=None if like is None else like.type)


def upsert(table_: Any, keys: Sequence[str], fields: Sequence[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET each field to the inserted value."""
    statement = insert(table_)
    return statement.on_conflict_do_update(
        index_elements=[table_.c[k] for k in keys], set_={f: statement.excluded[f] for f in fields}
    )


def latest(column_: Any, when: datetime | Any) -> Any:
    """SQL for max(column, when) that tolerates NULL: an out-of-order (replayed) event
    never moves a last-activity time backwards."""
    return case((column_.is_(None), when), (column_ < when, when), else_=column_)
