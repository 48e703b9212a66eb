"""Consolidation state and extraction watermarks on SQLite: the `JobsPort` methods over
the `consolidations` and `extraction_watermarks` tables (migration 13).

`SqlJobs` is mixed into `SQLiteStore` and runs its work through the store's `_read` and
`_write`. The SQL is plain upserts and range reads, portable to PostgreSQL as written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Connection, Row

from persyn.store.ports.jobs import Consolidation, ConsolidationStatus, Watermark
from persyn.store.schema.tables import consolidations, extraction_watermarks
from persyn.store.sql.dml import insert

__all__ = ["SqlJobs", "consolidated_at_import"]

T = TypeVar("T")

_c = consolidations.c
_w = extraction_watermarks.c


def _consolidation(row: Row[Any]) -> Consolidation:
    return Consolidation(
        agent_id=row.agent_id,
        conversation_id=row.conversation_id,
        status=ConsolidationStatus(row.status),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        last_error=row.last_error,
        detail=row.detail,
        updated_at=row.updated_at,
    )


def consolidated_at_import(connection: Connection, agent_id: str, conversation_id: str, at: datetime) -> None:
    """An imported conversation came with its summary: done at import, unless it has a state."""
    connection.execute(
        insert(consolidations).on_conflict_do_nothing(),
        {
            "agent_id": agent_id,
            "conversation_id": conversation_id,
            "status": ConsolidationStatus.DONE.value,
            "attempts": 0,
            "detail": "imported",
            "updated_at": at,
        },
    )


class SqlJobs:
    """The conversation-jobs part of `SQLiteStore`."""

    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    # consolidation state ---------------------------------------------------------------
    async def get_consolidation(self, agent_id: str, conversation_id: str) -> Consolidation | None:
        statement = select(consolidations).where(
            _c.agent_id == agent_id, _c.conversation_id == conversation_id
        )

        def work(connection: Connection) -> Consolidation | None:
            row = connection.execute(statement).first()
            return None if row is None else _consolidation(row)

        return await self._read("get_consolidation", work)

    async def set_consolidation(self, state: Consolidation) -> None:
        values = state.model_dump()
        values["status"] = state.status.value
        statement = insert(consolidations).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=[_c.agent_id, _c.conversation_id],
            set_={k: statement.excluded[k] for k in values if k not in ("agent_id", "conversation_id")},
        )
        await self._write("set_consolidation", lambda connection: connection.execute(statement))

    async def consolidation_pending(self, agent_id: str, conversation_id: str, at: datetime) -> bool:
        state = Consolidation(
            agent_id=agent_id,
            conversation_id=conversation_id,
            status=ConsolidationStatus.PENDING,
            updated_at=at,
        )
        values = state.model_dump()
        values["status"] = state.status.value
        statement = insert(consolidations).values(**values).on_conflict_do_nothing()

        def work(connection: Connection) -> bool:
            return connection.execute(statement).rowcount == 1

        return await self._write("consolidation_pending", work)

    async def consolidations(
        self, status: ConsolidationStatus, *, due_by: datetime | None = None, limit: int = 100
    ) -> list[Consolidation]:
        statement = select(consolidations).where(_c.status == status.value)
        if due_by is not None:
            statement = statement.where(_c.next_attempt_at <= due_by).order_by(_c.next_attempt_at)
        else:
            statement = statement.order_by(_c.updated_at)
        statement = statement.limit(max(1, limit))

        def work(connection: Connection) -> list[Consolidation]:
            return [_consolidation(row) for row in connection.execute(statement)]

        return await self._read("consolidations", work)

    # extraction watermarks -------------------------------------------------------------
    async def get_watermark(self, agent_id: str, conversation_id: str, reader: str) -> str | None:
        statement = select(_w.message_id).where(
            _w.agent_id == agent_id, _w.conversation_id == conversation_id, _w.reader == reader
        )
        return await self._read("get_watermark", lambda connection: connection.scalar(statement))

    async def set_watermark(self, watermark: Watermark) -> None:
        values = watermark.model_dump()
        statement = insert(extraction_watermarks).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=[_w.agent_id, _w.conversation_id, _w.reader],
            set_={"message_id": statement.excluded.message_id, "updated_at": statement.excluded.updated_at},
        )
        await self._write("set_watermark", lambda connection: connection.execute(statement))
