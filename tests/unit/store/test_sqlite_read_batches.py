"""Reads asked for together (a turn's context sources, gathered) run in one transaction on
one read thread, each with its own result or its own error, and see the writes their caller
awaited before asking."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.store.sqlite.store import SQLiteStore


class _Probe(SQLiteStore):
    """The real store plus a read of a table that does not exist."""

    async def broken(self) -> Any:
        return await self._read("broken read", lambda c: c.execute(text("SELECT * FROM no_such_table")).all())


async def test_gathered_reads_share_one_transaction_and_fail_alone(tmp_path: Path) -> None:
    store = _Probe(tmp_path / "persyn.db")
    await store.setup()
    begun: list[int] = []

    def count(connection: Connection) -> None:
        begun.append(1)

    event.listen(store._reader, "begin", count)  # pyright: ignore[reportPrivateUsage]
    try:
        agent = new_id()
        await store.set_flag(agent, "a", "1")
        await store.set_flag(agent, "b", "2")
        first, second, broken, listed = await asyncio.gather(
            store.get_flag(agent, "a"),
            store.get_flag(agent, "b"),
            store.broken(),
            store.flags_with_prefix(agent, ""),
            return_exceptions=True,
        )
        assert (first, second, listed) == ("1", "2", {"a": "1", "b": "2"})
        assert isinstance(broken, StoreError) and "broken read" in str(broken)
        assert len(begun) == 1
        await store.set_flag(agent, "a", "3")  # awaited: the next read sees it
        assert await store.get_flag(agent, "a") == "3"
        assert len(begun) == 2
    finally:
        await store.close()
