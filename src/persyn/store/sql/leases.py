"""Leases on SQLite (`store/ports/leases.py`) over the `leases` table (migrations 24, 26). Mixed into
`SQLiteStore` (and so into `PostgresStore`): portable SQLAlchemy Core. Acquiring is one
INSERT … ON CONFLICT (name) DO UPDATE … WHERE (the row is the caller's, or has lapsed), which
both backends run atomically, read back in the same write transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import case, delete, select
from sqlalchemy.engine import Connection, Row

from persyn.store.ports.leases import Lease, LeasesPort
from persyn.store.schema.leases import leases
from persyn.store.sql.dml import insert
from persyn.store.sql.work import p

__all__ = ["SqlLeases"]

T = TypeVar("T")
_c = leases.c
_insert = insert(leases)
_ACQUIRE = _insert.on_conflict_do_update(
    index_elements=[_c.name],
    set_={
        "holder": _insert.excluded.holder,
        "expires_at": _insert.excluded.expires_at,
        "state": _insert.excluded.state,
        # A renewal keeps the time it changed hands; a takeover starts a new one.
        "acquired_at": case(
            (_c.holder == _insert.excluded.holder, _c.acquired_at), else_=_insert.excluded.acquired_at
        ),
    },
    where=(_c.holder == _insert.excluded.holder) | (_c.expires_at <= _insert.excluded.acquired_at),
)
_GET = select(leases).where(_c.name == p("name", _c.name))
_RELEASE = delete(leases).where(_c.name == p("name", _c.name), _c.holder == p("holder", _c.holder))


def _from_row(row: Row[Any]) -> Lease:
    return Lease(
        name=row.name,
        holder=row.holder,
        acquired_at=row.acquired_at,
        expires_at=row.expires_at,
        state=row.state,
    )


class SqlLeases(LeasesPort):
    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    async def acquire_lease(
        self, name: str, holder: str, now: datetime, ttl: timedelta, state: str = ""
    ) -> Lease:
        if ttl <= timedelta(0):
            raise ValueError(f"a lease's ttl must be positive, not {ttl!r}")
        wanted = Lease(name=name, holder=holder, acquired_at=now, expires_at=now + ttl, state=state)

        def work(connection: Connection) -> Lease:
            connection.execute(_ACQUIRE, wanted.model_dump())
            return _from_row(connection.execute(_GET, {"p_name": name}).one())

        return await self._write("acquire_lease", work)

    async def release_lease(self, name: str, holder: str) -> bool:
        params = {"p_name": name, "p_holder": holder}
        return await self._write("release_lease", lambda c: c.execute(_RELEASE, params).rowcount > 0)

    async def leases(self) -> list[Lease]:
        statement = select(leases).order_by(_c.name)
        return await self._read("leases", lambda c: [_from_row(r) for r in c.execute(statement)])
