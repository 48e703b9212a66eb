"""Model-call checkpoints on SQLite (`store/ports/model_calls.py`) over the `model_calls` table
(migration 20). Mixed into `SQLiteStore` (and so into `PostgresStore`): portable SQLAlchemy
Core, one primary-key lookup and one insert that keeps the first response."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from persyn.store.ports.model_calls import MAX_CALL_KEY, ModelCall, ModelCallsPort
from persyn.store.schema.tables import model_calls
from persyn.store.sql.dml import insert
from persyn.store.sql.work import p

__all__ = ["SqlModelCalls"]

T = TypeVar("T")
_c = model_calls.c
_GET = select(_c.response).where(_c.call_key == p("call_key", _c.call_key))
_PUT = insert(model_calls).on_conflict_do_nothing(index_elements=[_c.call_key])


class SqlModelCalls(ModelCallsPort):
    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        def _write_soon(self, what: str, work: Callable[[Connection], T]) -> asyncio.Future[T]: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    async def model_call(self, call_key: str) -> str | None:
        if not 0 < len(call_key) <= MAX_CALL_KEY:
            return None  # no such key can have been stored
        params = {"p_call_key": call_key}
        return await self._read("model_call", lambda c: c.execute(_GET, params).scalar())

    def save_model_call(
        self, call_key: str, workflow_id: str, response: str, at: datetime
    ) -> asyncio.Future[None]:
        values = ModelCall(
            call_key=call_key, workflow_id=workflow_id, response=response, created_at=at
        ).model_dump()

        def work(connection: Connection) -> None:
            connection.execute(_PUT, values)

        return self._write_soon("save_model_call", work)

    async def purge_model_calls(self, before: datetime) -> int:
        statement = delete(model_calls).where(_c.created_at < before)
        return await self._write("purge_model_calls", lambda c: c.execute(statement).rowcount)
