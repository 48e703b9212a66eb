"""Runs on SQLite (`store/ports/runs.py`): the `RunsPort` methods over `run_states`,
`run_conversations` and `channel_spend` (migration 14).

Mixed into `SQLiteStore`; work runs through the store's `_read` and `_write`. A compare-and-set
is a read and a write in one write transaction (the single writer, BEGIN IMMEDIATE across
processes), as `update_flag` was. The SQL is portable to PostgreSQL as written, except the
upserts' dialect import, shared with every other part.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection, Row

from persyn.core.records import Sensitivity
from persyn.store.ports.runs import ChannelEntry, ChannelSpend, RunConversation, RunsPort, RunState, SpendKind
from persyn.store.rows import Provenance, checked_id
from persyn.store.schema.tables import channel_spend, run_conversations, run_states
from persyn.store.sql.dml import insert
from persyn.store.sql.work import p

__all__ = ["SqlRuns"]

T = TypeVar("T")

_s = run_states.c
_c = run_conversations.c
_l = channel_spend.c


def _state(row: Row[Any]) -> RunState:
    return RunState.model_construct(  # validated on the way in
        agent_id=row.agent_id,
        run_id=row.run_id,
        tokens=row.tokens,
        stopped=row.stopped,
        provenance=None if row.provenance is None else Provenance.model_validate(row.provenance),
        sends=tuple(row.sends or ()),
        updated_at=row.updated_at,
    )


def _state_values(state: RunState) -> dict[str, Any]:
    return {
        "agent_id": state.agent_id,
        "run_id": state.run_id,
        "tokens": state.tokens,
        "stopped": state.stopped,
        "provenance": None if state.provenance is None else state.provenance.model_dump(mode="json"),
        "sends": list(state.sends),
        "updated_at": state.updated_at,
    }


class SqlRuns(RunsPort):
    """The runs part of `SQLiteStore`."""

    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    async def get_run(self, agent_id: str, run_id: str) -> RunState | None:
        statement = select(run_states).where(_s.agent_id == agent_id, _s.run_id == run_id)

        def work(connection: Connection) -> RunState | None:
            row = connection.execute(statement).first()
            return None if row is None else _state(row)

        return await self._read("get_run", work)

    async def update_run(
        self, agent_id: str, run_id: str, change: Callable[[RunState], RunState], now: datetime
    ) -> RunState:
        fresh = RunState(agent_id=agent_id, run_id=run_id, updated_at=now)  # checks both ids
        statement = select(run_states).where(_s.agent_id == agent_id, _s.run_id == run_id)

        def work(connection: Connection) -> RunState:
            row = connection.execute(statement).first()
            current = fresh if row is None else _state(row)
            changed = RunState.model_validate(
                change(current).model_dump() | {"agent_id": agent_id, "run_id": run_id, "updated_at": now}
            )
            upsert = insert(run_states).values(**_state_values(changed))
            fields = ("tokens", "stopped", "provenance", "sends", "updated_at")
            connection.execute(
                upsert.on_conflict_do_update(
                    index_elements=[_s.agent_id, _s.run_id], set_={f: upsert.excluded[f] for f in fields}
                )
            )
            return changed

        return await self._write("update_run", work)

    async def set_run_conversation(self, row: RunConversation) -> None:
        values = row.model_dump() | {"sensitivity": row.sensitivity.value}
        upsert = insert(run_conversations).values(**values)
        fields = ("run_id", "kind", "reminder_id", "sensitivity", "created_at")
        statement = upsert.on_conflict_do_update(
            index_elements=[_c.agent_id, _c.conversation_id], set_={f: upsert.excluded[f] for f in fields}
        )
        await self._write("set_run_conversation", lambda c: c.execute(statement))

    async def get_run_conversation(self, agent_id: str, conversation_id: str) -> RunConversation | None:
        statement = select(run_conversations).where(
            _c.agent_id == agent_id, _c.conversation_id == conversation_id
        )

        def work(connection: Connection) -> RunConversation | None:
            row = connection.execute(statement).first()
            if row is None:
                return None
            return RunConversation.model_construct(
                agent_id=row.agent_id,
                conversation_id=row.conversation_id,
                run_id=row.run_id,
                kind=row.kind,
                reminder_id=row.reminder_id,
                sensitivity=Sensitivity(row.sensitivity),
                created_at=row.created_at,
            )

        return await self._read("get_run_conversation", work)

    async def spend_channel(
        self,
        agent_id: str,
        kind: SpendKind,
        service: str,
        channel: str,
        key: str,
        tokens: int,
        at: datetime,
        *,
        since: datetime,
        limit: int | None = None,
    ) -> ChannelSpend:
        entry = ChannelEntry(kind=kind, service=service, channel=channel, key=key, tokens=tokens, since=since)
        agent_id = checked_id(agent_id, "agent id")
        return await self._write("spend_channel", lambda c: spend_channel_row(c, agent_id, entry, at, limit))

    async def channel_spent(
        self, agent_id: str, kind: SpendKind, service: str, channel: str, since: datetime
    ) -> int:
        params = {
            "p_agent_id": agent_id,
            "p_kind": kind.value,
            "p_service": service,
            "p_channel": channel,
            "p_since": since,
        }
        return await self._read(
            "channel_spent", lambda c: int(c.execute(_SQL_SPENT_SINCE, params).scalar_one())
        )

    async def purge_runs(self, before: datetime) -> int:
        def work(connection: Connection) -> int:
            purged = connection.execute(delete(run_states).where(_s.updated_at < before)).rowcount
            purged += connection.execute(delete(run_conversations).where(_c.created_at < before)).rowcount
            return purged + connection.execute(delete(channel_spend).where(_l.at < before)).rowcount

        return await self._write("purge_runs", work)


def spend_channel_row(
    connection: Connection, agent_id: str, entry: ChannelEntry, at: datetime, limit: int | None = None
) -> ChannelSpend:
    """`spend_channel`'s work inside a caller's write transaction (`record_reply` spends the
    reply's entry with the reply)."""
    params = {
        "p_agent_id": agent_id,
        "p_kind": entry.kind.value,
        "p_service": entry.service,
        "p_channel": entry.channel,
        "p_key": entry.key,
        "p_since": entry.since,
    }
    used = int(connection.execute(_SQL_SPENT_SINCE, params).scalar_one())
    if connection.execute(_SQL_ENTRY_KNOWN, params).first() is not None:
        return ChannelSpend(used=used, recorded=True)  # this very entry, again
    if limit is not None and used + entry.tokens > limit:
        return ChannelSpend(used=used, recorded=False)
    values = {"agent_id": agent_id, "kind": entry.kind.value, "service": entry.service}
    values |= {"channel": entry.channel, "key": entry.key, "at": at, "tokens": entry.tokens}
    connection.execute(_SQL_ADD_ENTRY, values)
    return ChannelSpend(used=used, recorded=True)


# Built once (see `_sqlite_work`): a spoken turn spends its reply's entry through these.
_CHANNEL = (
    _l.agent_id == p("agent_id"),
    _l.kind == p("kind"),
    _l.service == p("service"),
    _l.channel == p("channel"),
)
_SQL_SPENT_SINCE = select(func.coalesce(func.sum(_l.tokens), 0)).where(*_CHANNEL, _l.at > p("since", _l.at))
_SQL_ENTRY_KNOWN = select(_l.key).where(*_CHANNEL, _l.key == p("key"))
_SQL_ADD_ENTRY = insert(channel_spend)
