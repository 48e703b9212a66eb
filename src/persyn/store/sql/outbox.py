"""The outbox on SQLite (`store/ports/outbox.py`): the `OutboxPort` methods over the `outbox`
table (migration 12).

Mixed into `SQLiteStore`; work runs through the store's `_read` and `_write`. Every write is
one statement whose outcome says what happened (an insert that found the id, an update that
found the row already delivered), so racing processes need no lock of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection, Row

from persyn.store.ports.outbox import OutboxPort, OutboxRow
from persyn.store.schema.tables import outbox
from persyn.store.sql.dml import insert
from persyn.store.sql.work import p

__all__ = ["SqlOutbox", "put_outbox_row"]

T = TypeVar("T")

_o = outbox.c


def _from_row(row: Row[Any]) -> OutboxRow:
    return OutboxRow(
        id=row.id,
        agent_id=row.agent_id,
        service=row.service,
        channel=row.channel,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        event_id=row.event_id,
        text=row.text,
        created_at=row.created_at,
        delivered_at=row.delivered_at,
        attempts=row.attempts,
        last_error=row.last_error,
    )


def put_outbox_row(connection: Connection, row: OutboxRow, *, read_back: bool = True) -> OutboxRow:
    """Insert the row unless its id (the idempotency key) is there; the stored row, or `row`
    itself without `read_back` (a reply's transaction needs nothing back)."""
    connection.execute(_SQL_PUT, row.model_dump())
    if not read_back:
        return row
    return _from_row(connection.execute(_SQL_ROW, {"p_id": row.id}).one())


# Built once (see `_sqlite_work`): every spoken turn writes one.
_SQL_PUT = insert(outbox).on_conflict_do_nothing(index_elements=["id"])
_SQL_ROW = select(outbox).where(_o.id == p("id"))


class SqlOutbox(OutboxPort):
    """The outbox part of `SQLiteStore`."""

    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    async def put_outbox(self, row: OutboxRow) -> OutboxRow:
        return await self._write("put_outbox", lambda connection: put_outbox_row(connection, row))

    async def get_outbox(self, agent_id: str, row_id: str) -> OutboxRow | None:
        statement = select(outbox).where(_o.agent_id == agent_id, _o.id == row_id)

        def work(connection: Connection) -> OutboxRow | None:
            found = connection.execute(statement).first()
            return None if found is None else _from_row(found)

        return await self._read("get_outbox", work)

    async def pending_outbox(self, agent_id: str, service: str, *, limit: int = 100) -> list[OutboxRow]:
        statement = (
            select(outbox)
            .where(_o.agent_id == agent_id, _o.service == service, _o.delivered_at.is_(None))
            .order_by(_o.created_at, _o.id)
            .limit(max(limit, 0))
        )
        return await self._read("pending_outbox", lambda c: [_from_row(r) for r in c.execute(statement)])

    async def mark_outbox_delivered(self, agent_id: str, row_id: str, at: datetime) -> bool:
        statement = (
            update(outbox)
            .where(_o.agent_id == agent_id, _o.id == row_id, _o.delivered_at.is_(None))
            .values(delivered_at=at)
        )
        return await self._write("mark_outbox_delivered", lambda c: c.execute(statement).rowcount == 1)

    async def outbox_failed(self, agent_id: str, row_id: str, error: str) -> None:
        statement = (
            update(outbox)
            .where(_o.agent_id == agent_id, _o.id == row_id)
            .values(attempts=_o.attempts + 1, last_error=error[:2000])
        )
        await self._write("outbox_failed", lambda c: c.execute(statement))

    async def purge_outbox(self, before: datetime) -> int:
        statement = delete(outbox).where(_o.created_at < before)
        return await self._write("purge_outbox", lambda c: c.execute(statement).rowcount)
