"""Web keys on SQLite (`store/ports/web_keys.py`) over the `web_keys` table (migration 15).

Mixed into `SQLiteStore`; plain SQLAlchemy core, nothing SQLite-specific."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection, Row

from persyn.store.ports.web_keys import WebKey, WebKeysPort
from persyn.store.schema.tables import web_keys

__all__ = ["SqlWebKeys"]

T = TypeVar("T")
_k = web_keys.c


def _from_row(row: Row[Any]) -> WebKey:
    return WebKey(
        id=row.id,
        name=row.name,
        key_hash=row.key_hash,
        contact_id=row.contact_id,
        operator=bool(row.operator),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


class SqlWebKeys(WebKeysPort):
    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    async def add_web_key(self, key: WebKey) -> WebKey:
        def work(connection: Connection) -> WebKey:
            connection.execute(insert(web_keys).values(**key.model_dump()))
            return key

        return await self._write("add_web_key", work)

    async def web_keys(self) -> list[WebKey]:
        statement = select(web_keys).order_by(_k.created_at, _k.id)
        return await self._read(
            "web_keys", lambda connection: [_from_row(r) for r in connection.execute(statement)]
        )

    async def web_key_by_hash(self, key_hash: str) -> WebKey | None:
        statement = select(web_keys).where(_k.key_hash == key_hash)

        def work(connection: Connection) -> WebKey | None:
            found = connection.execute(statement).first()
            return None if found is None else _from_row(found)

        return await self._read("web_key_by_hash", work)

    async def revoke_web_key(self, key_id: str, now: datetime) -> WebKey | None:
        def work(connection: Connection) -> WebKey | None:
            connection.execute(
                update(web_keys).where(_k.id == key_id, _k.revoked_at.is_(None)).values(revoked_at=now)
            )
            found = connection.execute(select(web_keys).where(_k.id == key_id)).first()
            return None if found is None else _from_row(found)

        return await self._write("revoke_web_key", work)
