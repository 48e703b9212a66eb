"""How the SQL stores' parts run their work: on the single writer thread or the reader
pool, each call in one transaction (the concurrency model is in `sqlite/store.py` and
`postgres/store.py`), plus the statement-building helpers the parts share.

Every `sql/<concern>.py` part derives from `SqlWork`; `SqlStore` composes the parts, and
each backend's store owns the engines and threads this class uses.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Engine, bindparam, case
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.expression import Executable

from persyn.core.errors import StoreError
from persyn.store.sql.dml import insert

__all__ = ["SqlWork", "latest", "p", "upsert"]

T = TypeVar("T")
_BATCH_PASSES = 4  # event-loop passes a read batch may wait for more reads to join it
# A read waiting for its batch: what it is (for errors), its work, and where its result goes.
_PendingRead = tuple[str, Callable[[Connection], Any], "asyncio.Future[Any]"]


class SqlWork:
    """Runs blocking work off the event loop, one transaction per call."""

    _writer: Engine
    _reader: Engine
    _write_thread: ThreadPoolExecutor
    _read_threads: ThreadPoolExecutor
    _closed: bool
    _pending_reads: dict[asyncio.AbstractEventLoop, list[_PendingRead]]

    def _label(self) -> str:
        """The database as errors name it (a file path; a URL without its password)."""
        raise NotImplementedError

    async def _write(self, what: str, work: Callable[[Connection], T]) -> T:
        return await self._run(self._write_thread, self._writer, what, work)

    def _write_soon(self, what: str, work: Callable[[Connection], T]) -> asyncio.Future[T]:
        """Queue a write now (not when awaited) and return its completion. The one write
        thread takes work in order, so every write asked for after this one commits after it."""
        if self._closed:
            raise StoreError(f"{what}: the store for {self._label()!r} is closed")
        job = functools.partial(self._in_transaction, self._writer, what, work)
        return asyncio.get_running_loop().run_in_executor(self._write_thread, job)

    async def _read(self, what: str, work: Callable[[Connection], T]) -> T:
        """Reads asked for in the same few passes of the event loop (a turn's context
        sources, gathered, each a task or two deep) run together: one hop to a read thread,
        one transaction, one snapshot. The batch waits for a pass in which no read joined it,
        at least one and at most `_BATCH_PASSES` (a pass takes microseconds; reads asked for
        in the pass its wait ends in are queued behind it). Each reader's earlier writes
        had committed before it asked (it awaited them), so a read still sees its own
        writes; each read fails on its own."""
        if self._closed:
            raise StoreError(f"{what}: the store for {self._label()!r} is closed")
        loop = asyncio.get_running_loop()
        batch = self._pending_reads.get(loop)
        if batch is None:
            batch = self._pending_reads[loop] = []
            loop.call_soon(self._flush_reads, loop, 0, 1)
        future: asyncio.Future[Any] = loop.create_future()
        batch.append((what, work, future))
        return await future

    async def _search(self, what: str, work: Callable[[Connection], T]) -> T:
        """A read that costs milliseconds (vector or keyword candidates) runs alone: its own
        hop to a read thread and its own transaction, not a place in a batch, so the two
        searches of a hybrid recall, asked together, run side by side on two cores instead
        of one after the other in one batch (1M records in one channel: ~max instead of
        the sum of the two)."""
        return await self._run(self._read_threads, self._reader, what, work)

    def _flush_reads(self, loop: asyncio.AbstractEventLoop, seen: int, passes: int) -> None:
        waiting = self._pending_reads.get(loop, [])
        if len(waiting) > seen and passes < _BATCH_PASSES and not self._closed:
            loop.call_soon(self._flush_reads, loop, len(waiting), passes + 1)  # more may come
            return
        batch = self._pending_reads.pop(loop, [])
        if self._closed:
            for what, _work, future in batch:
                if not future.done():
                    future.set_exception(StoreError(f"{what}: the store for {self._label()!r} is closed"))
            return
        try:
            done = loop.run_in_executor(self._read_threads, self._read_batch, batch)
        except RuntimeError as exc:  # the read threads were shut down meanwhile
            failed: asyncio.Future[list[tuple[bool, Any]]] = loop.create_future()
            failed.set_exception(StoreError(f"reading {self._label()!r} failed: {exc}"))
            done = failed
        done.add_done_callback(functools.partial(_settle, batch))

    def _read_batch(self, batch: list[_PendingRead]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        try:
            with self._reader.begin() as connection:
                for what, work, _future in batch:
                    try:
                        outcomes.append((True, work(connection)))
                    except SQLAlchemyError as exc:
                        outcomes.append((False, self._failure(what, exc)))
                    except Exception as exc:  # the caller's own error, as a lone read raises it
                        outcomes.append((False, exc))
        except SQLAlchemyError as exc:  # the transaction itself (begin, commit)
            return [(False, self._failure(what, exc)) for what, _work, _future in batch]
        return outcomes

    def _failure(self, what: str, exc: SQLAlchemyError) -> StoreError:
        error = StoreError(f"{what} failed on {self._label()!r}: {exc}")
        error.__cause__ = exc
        return error

    async def _run(
        self, threads: ThreadPoolExecutor, engine: Engine, what: str, work: Callable[[Connection], T]
    ) -> T:
        if self._closed:
            raise StoreError(f"{what}: the store for {self._label()!r} is closed")
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
            raise StoreError(f"{what} failed on {self._label()!r}: {exc}") from exc


def _settle(batch: list[_PendingRead], done: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    """Hand each read of a batch its result or its error (a reader that gave up is skipped)."""
    error = None if done.cancelled() else done.exception()
    for index, (_what, _work, future) in enumerate(batch):
        if future.done():
            continue
        if done.cancelled():
            future.cancel()
        elif error is not None:
            future.set_exception(error)
        else:
            ok, value = done.result()[index]
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


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
