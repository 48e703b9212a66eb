"""The activity log on SQLite (the activity sub-port): one `activity_runs` row per
self-initiated run, read newest first down the (agent_id, at) index (migration 11)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection

from persyn.core.ids import new_id
from persyn.store.ports.activity import ActivityEntry
from persyn.store.schema.tables import activity_runs
from persyn.store.sql.dml import insert
from persyn.store.sql.mapping import activity_from_row, activity_values
from persyn.store.sql.work import SqlWork

__all__ = ["SqlActivity"]

_runs = activity_runs.c
_FIELDS = ("at", "kind", "reminder_id", "objective", "outcome", "tokens", "conversation_id")
_PROVENANCE = ("channel", "participant_ids", "sensitivity")


class SqlActivity(SqlWork):
    """The activity half of `SQLiteStore`."""

    async def add_activity(self, entry: ActivityEntry) -> None:
        values = {"id": new_id(entry.at), **activity_values(entry)}
        statement = insert(activity_runs).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=[_runs.agent_id, _runs.run_id],
            set_={f: statement.excluded[f] for f in (*_FIELDS, *_PROVENANCE)},
        )

        def work(connection: Connection) -> None:
            connection.execute(statement)

        await self._write("add_activity", work)

    async def recent_activity(
        self,
        agent_id: str,
        *,
        limit: int,
        kind: str | None = None,
        reminder_id: str | None = None,
        since: datetime | None = None,
    ) -> list[ActivityEntry]:
        if limit <= 0:
            return []
        statement = select(activity_runs).where(_runs.agent_id == agent_id)
        if kind is not None:
            statement = statement.where(_runs.kind == kind)
        if reminder_id is not None:
            statement = statement.where(_runs.reminder_id == reminder_id)
        if since is not None:
            statement = statement.where(_runs.at >= since)
        statement = statement.order_by(_runs.at.desc(), _runs.run_id.desc()).limit(limit)
        return await self._fetch_all("recent_activity", statement, activity_from_row)

    async def activity_tokens(self, agent_id: str, after: datetime, until: datetime) -> int:
        statement = select(func.coalesce(func.sum(_runs.tokens), 0)).where(
            _runs.agent_id == agent_id, _runs.at > after, _runs.at <= until
        )
        return await self._read("activity_tokens", lambda c: int(c.execute(statement).scalar_one()))

    async def purge_activity(self, agent_id: str, before: datetime) -> int:
        statement = delete(activity_runs).where(_runs.agent_id == agent_id, _runs.at < before)
        return await self._write("purge_activity", lambda c: int(c.execute(statement).rowcount or 0))
