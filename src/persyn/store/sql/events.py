"""Inbound events, completion markers and deliberation traces on SQLite (the events sub-port)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    delete,
    select,
)
from sqlalchemy.engine import Connection

from persyn.core.events import CompletionMarker, Event
from persyn.core.ids import new_id
from persyn.store.ports.events import DeliberationTrace
from persyn.store.schema.tables import checked_id, completion_markers, deliberation_traces, events
from persyn.store.sql.dml import insert
from persyn.store.sql.mapping import event_from_row, event_values, marker_from_row
from persyn.store.sql.work import SqlWork, p, upsert

__all__ = ["SqlEvents", "put_marker_row"]

_IDS_PER_STATEMENT = 500  # well under SQLite's bound-parameter limit


class SqlEvents(SqlWork):
    """The events half of `SQLiteStore`."""

    # events and completion markers -----------------------------------------------------
    async def save_event(self, event: Event) -> bool:
        checked_id(event.agent_id, "agent id")
        checked_id(event.id, "event id")
        values = event_values(event)
        return await self._write("save_event", lambda c: c.execute(_SQL_SAVE_EVENT, values).rowcount == 1)

    async def get_event(self, agent_id: str, event_id: str) -> Event | None:
        params = {"p_agent_id": agent_id, "p_id": event_id}
        return await self._fetch_one("get_event", _SQL_EVENT, event_from_row, params)

    async def put_marker(self, agent_id: str, marker: CompletionMarker) -> None:
        agent_id = checked_id(agent_id, "agent id")
        checked_id(marker.event_id, "event id")
        await self._write("put_marker", lambda connection: put_marker_row(connection, agent_id, marker))

    async def get_marker(self, agent_id: str, event_id: str, now: datetime) -> CompletionMarker | None:
        params = {"p_agent_id": agent_id, "p_event_id": event_id, "p_now": now}
        return await self._fetch_one("get_marker", _SQL_MARKER, marker_from_row, params)

    async def purge_markers(self, now: datetime) -> int:
        statement = delete(completion_markers).where(completion_markers.c.expires_at <= now)
        return await self._write("purge_markers", lambda c: c.execute(statement).rowcount)

    # deliberation traces -------------------------------------------------------------------
    async def merge_deliberation(
        self, agent_id: str, event_id: str, trace: Mapping[str, Any], now: datetime
    ) -> None:
        """Read and write in one write transaction (writes are serialised: atomic)."""
        agent_id = checked_id(agent_id, "agent id")
        event_id = checked_id(event_id, "event id")
        await self._write("merge_deliberation", lambda c: merge_trace_row(c, agent_id, event_id, trace, now))

    async def deliberation_traces(self, agent_id: str, event_ids: Sequence[str]) -> list[DeliberationTrace]:
        wanted = list(dict.fromkeys(event_ids))
        if not wanted:
            return []
        traces = deliberation_traces.c
        found: list[DeliberationTrace] = []
        for start in range(0, len(wanted), _IDS_PER_STATEMENT):
            chunk = wanted[start : start + _IDS_PER_STATEMENT]
            statement = select(deliberation_traces).where(
                traces.agent_id == agent_id, traces.event_id.in_(chunk)
            )
            found += await self._fetch_all("deliberation_traces", statement, _trace_from_row)
        return found


def _trace_from_row(row: Any) -> DeliberationTrace:
    return DeliberationTrace(event_id=row.event_id, trace=dict(row.trace), updated_at=row.updated_at)


def merge_trace_row(
    connection: Connection, agent_id: str, event_id: str, trace: Mapping[str, Any], now: datetime
) -> None:
    """`merge_deliberation`'s work inside a caller's write transaction (`record_reply`)."""
    key = {"p_agent_id": agent_id, "p_event_id": event_id}
    merged: dict[str, Any] = dict(connection.execute(_SQL_TRACE, key).scalar() or {})
    merged.update(trace)
    values = {"id": new_id(now), "agent_id": agent_id, "event_id": event_id}
    connection.execute(_SQL_PUT_TRACE, {**values, "trace": merged, "updated_at": now})


def put_marker_row(connection: Connection, agent_id: str, marker: CompletionMarker) -> None:
    checked_id(marker.event_id, "event id")
    values = {
        "id": new_id(marker.created_at),
        "agent_id": agent_id,
        "event_id": marker.event_id,
        "transmitted": marker.transmitted,
        "text": marker.text,
        "reason": marker.reason,
        "created_at": marker.created_at,
        "expires_at": marker.expires_at,
    }
    connection.execute(_SQL_PUT_MARKER, values)


_SQL_SAVE_EVENT = insert(events).on_conflict_do_nothing()


_SQL_EVENT = select(events).where(events.c.agent_id == p("agent_id"), events.c.id == p("id"))


_MARKER_FIELDS = ("transmitted", "text", "reason", "created_at", "expires_at")


_SQL_PUT_MARKER = upsert(completion_markers, ("agent_id", "event_id"), _MARKER_FIELDS)


_SQL_MARKER = select(completion_markers).where(
    completion_markers.c.agent_id == p("agent_id"),
    completion_markers.c.event_id == p("event_id"),
    completion_markers.c.expires_at > p("now", completion_markers.c.expires_at),
)
_SQL_TRACE = select(deliberation_traces.c.trace).where(
    deliberation_traces.c.agent_id == p("agent_id"), deliberation_traces.c.event_id == p("event_id")
)
_SQL_PUT_TRACE = upsert(deliberation_traces, ("agent_id", "event_id"), ("trace", "updated_at"))
