"""Flags on SQLite (the flags sub-port): per-agent key/value state with compare-and-set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    delete,
    select,
)
from sqlalchemy.engine import Connection

from persyn.core.ids import new_id
from persyn.store.schema.tables import checked_id, flags
from persyn.store.sql.dml import insert
from persyn.store.sql.work import SqlWork, p, upsert

__all__ = ["SqlFlags"]


class SqlFlags(SqlWork):
    """The flags half of `SQLiteStore`."""

    # flags ---------------------------------------------------------------------------------
    async def get_flag(self, agent_id: str, key: str) -> str | None:
        params = {"p_agent_id": agent_id, "p_key": key}
        return await self._read("get_flag", lambda c: c.execute(_SQL_FLAG, params).scalar_one_or_none())

    async def set_flag(self, agent_id: str, key: str, value: str | None) -> None:
        agent_id = checked_id(agent_id, "agent id")
        if value is None:
            statement: Any = _SQL_DELETE_FLAG
            params: dict[str, Any] = {"p_agent_id": agent_id, "p_key": key}
        else:
            statement = _SQL_SET_FLAG
            params = {"id": new_id(), "agent_id": agent_id, "key": key, "value": value}
        await self._write("set_flag", lambda connection: connection.execute(statement, params))

    async def flags_with_prefix(self, agent_id: str, prefix: str, limit: int = 100) -> dict[str, str]:
        # A range scan on the unique (agent_id, key) index; LIKE would need escaping.
        if limit <= 0:
            return {}
        params = {"p_agent_id": agent_id, "p_low": prefix, "p_high": prefix + "\U0010ffff", "p_limit": limit}
        rows = await self._read(
            "flags_with_prefix", lambda c: c.execute(_SQL_FLAGS_WITH_PREFIX, params).all()
        )
        return {row.key: row.value for row in rows}

    async def set_flag_if_absent(self, agent_id: str, key: str, value: str) -> bool:
        """A real compare-and-set: the unique (agent_id, key) decides, not a prior read."""
        agent_id = checked_id(agent_id, "agent id")
        statement = (
            insert(flags)
            .values(id=new_id(), agent_id=agent_id, key=key, value=value)
            .on_conflict_do_nothing()
        )
        return await self._write("set_flag_if_absent", lambda c: c.execute(statement).rowcount == 1)

    async def update_flag(
        self, agent_id: str, key: str, change: Callable[[str | None], str | None]
    ) -> str | None:
        """Read and write in one write transaction (writes are serialised: atomic)."""
        agent_id = checked_id(agent_id, "agent id")

        return await self._write("update_flag", lambda c: update_flag_row(c, agent_id, key, change))


def update_flag_row(
    connection: Connection, agent_id: str, key: str, change: Callable[[str | None], str | None]
) -> str | None:
    """`update_flag` inside a caller's write transaction (`record_reply`)."""
    value = change(connection.execute(_SQL_FLAG, {"p_agent_id": agent_id, "p_key": key}).scalar())
    if value is None:
        connection.execute(_SQL_DELETE_FLAG, {"p_agent_id": agent_id, "p_key": key})
    else:
        connection.execute(_SQL_SET_FLAG, {"id": new_id(), "agent_id": agent_id, "key": key, "value": value})
    return value


_SQL_FLAG = select(flags.c.value).where(flags.c.agent_id == p("agent_id"), flags.c.key == p("key"))


_SQL_SET_FLAG = upsert(flags, ("agent_id", "key"), ("value",))


def clear_flags_row(connection: Connection, agent_id: str, keys: Sequence[str]) -> None:
    """Delete the flags `keys` inside a caller's write transaction (`record_reply`)."""
    for key in keys:
        connection.execute(_SQL_DELETE_FLAG, {"p_agent_id": agent_id, "p_key": key})


_SQL_DELETE_FLAG = delete(flags).where(flags.c.agent_id == p("agent_id"), flags.c.key == p("key"))


_SQL_FLAGS_WITH_PREFIX = (
    select(flags.c.key, flags.c.value)
    .where(flags.c.agent_id == p("agent_id"), flags.c.key >= p("low"), flags.c.key < p("high"))
    .order_by(flags.c.key)
    .limit(p("limit"))
)
