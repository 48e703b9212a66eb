"""Conversations and messages (the dialog sub-port) in the SQL both backends run; message
search is each backend's own (`sqlite/dialog.py`: FTS5, `postgres/dialog.py`: tsvector).
The module-level helpers run inside a caller's transaction, so `SqlStore` can record an
inbound turn or a reply in one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Text,
    case,
    cast,
    delete,
    func,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select
from sqlalchemy.sql.selectable import TextualSelect

from persyn.core.events import inbound_message_id
from persyn.core.ids import new_id
from persyn.store.base import (
    Conversation,
    Message,
    Role,
)
from persyn.store.ports.dialog import DialogHit
from persyn.store.schema.tables import checked_id, conversations, events, memory_records, messages
from persyn.store.sql.directory import index_participants
from persyn.store.sql.dml import insert
from persyn.store.sql.mapping import conversation_from_row, message_from_row
from persyn.store.sql.search import fts_any_words
from persyn.store.sql.work import SqlWork, latest, p

__all__ = [
    "AGENT_REPLY",
    "MESSAGE_COLUMNS",
    "RANK_FILTER",
    "RANK_JOIN",
    "SqlDialog",
    "add_message_row",
    "open_conversation_row",
]


class SqlDialog(SqlWork):
    """The dialog part of `SqlStore`, search excepted."""

    # conversations -----------------------------------------------------------------------
    async def open_conversation(
        self,
        agent_id: str,
        service: str,
        channel: str,
        participant_ids: Sequence[str],
        now: datetime,
        idle_timeout_seconds: float,
        kind: str = "dialog",
    ) -> Conversation:
        """One open conversation per (service, channel, kind): a reflection on a channel
        does not join the dialog there. Closing an idle one and opening its successor
        happen in the same transaction."""
        agent_id = checked_id(agent_id, "agent id")
        participants = [checked_id(p, "participant id") for p in participant_ids]
        return await self._write(
            "open_conversation",
            lambda c: open_conversation_row(
                c, agent_id, service, channel, participants, now, idle_timeout_seconds, kind
            ),
        )

    async def get_conversation(self, agent_id: str, conversation_id: str) -> Conversation | None:
        params = {"p_agent_id": agent_id, "p_id": conversation_id}
        return await self._fetch_one("get_conversation", _SQL_CONVERSATION, conversation_from_row, params)

    async def list_conversations(
        self, agent_id: str, *, channel: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Newest first by start time; ties broken by id (ULID order)."""
        if limit <= 0:
            return []
        statement = select(conversations).where(conversations.c.agent_id == agent_id)
        if channel is not None:
            statement = statement.where(conversations.c.channel == channel)
        statement = statement.order_by(conversations.c.started_at.desc(), conversations.c.id.desc())
        return await self._fetch_all("list_conversations", statement.limit(limit), conversation_from_row)

    async def close_idle_conversations(
        self, agent_id: str | None, now: datetime, idle_timeout_seconds: float
    ) -> list[Conversation]:
        """`agent_id` None sweeps every agent (the scheduler's housekeeping)."""
        threshold = now - timedelta(seconds=idle_timeout_seconds)
        conditions = [conversations.c.closed_at.is_(None), conversations.c.last_activity_at < threshold]
        if agent_id is not None:
            conditions.append(conversations.c.agent_id == agent_id)

        statement = update(conversations).where(*conditions).values(closed_at=now).returning(*conversations.c)
        closed = await self._fetch_all(
            "close_idle_conversations", statement, conversation_from_row, write=True
        )
        return sorted(closed, key=lambda c: (c.last_activity_at, c.id))  # RETURNING has no order

    async def close_conversation(
        self, agent_id: str, conversation_id: str, now: datetime
    ) -> Conversation | None:
        statement = (
            update(conversations)
            .where(
                conversations.c.agent_id == agent_id,
                conversations.c.id == conversation_id,
                conversations.c.closed_at.is_(None),
            )
            .values(closed_at=now)
            .returning(*conversations.c)
        )
        closed = await self._fetch_all("close_conversation", statement, conversation_from_row, write=True)
        return closed[0] if closed else None

    # dialog ------------------------------------------------------------------------------
    async def add_message(self, message: Message) -> bool:
        """Also touches the open conversation's last activity: a slow reply is activity."""
        return await self._write("add_message", lambda c: add_message_row(c, message))

    async def recent_messages(self, agent_id: str, conversation_id: str, limit: int) -> list[Message]:
        """The last `limit` messages, oldest first: (created_at, id) order, so messages stamped
        in the same instant still come back in ULID order. Every turn reads them: built once."""
        if limit <= 0:
            return []
        params = {"p_agent_id": agent_id, "p_conversation_id": conversation_id, "p_limit": limit}
        found = await self._fetch_all("recent_messages", _SQL_RECENT_MESSAGES, message_from_row, params)
        return list(reversed(found))

    async def turn_messages(
        self, agent_id: str, conversation_id: str, input_message_id: str, limit: int
    ) -> list[Message]:
        if limit <= 0:
            return []
        params = {
            "p_agent_id": agent_id,
            "p_conversation_id": conversation_id,
            "p_input": input_message_id,
            "p_limit": limit,
        }
        found = await self._fetch_all("turn_messages", _SQL_TURN_MESSAGES, message_from_row, params)
        return sorted(found, key=lambda m: (m.created_at, m.id))

    async def channel_messages(self, agent_id: str, service: str, channel: str, limit: int) -> list[Message]:
        if limit <= 0:
            return []
        params = {"p_agent_id": agent_id, "p_service": service, "p_channel": channel, "p_limit": limit}
        found = await self._fetch_all("channel_messages", _SQL_CHANNEL_MESSAGES, message_from_row, params)
        return list(reversed(found))

    async def agent_reply_for_event(self, agent_id: str, event_id: str) -> Message | None:
        params = {"p_agent_id": agent_id, "p_event_id": event_id}
        return await self._fetch_one("agent_reply_for_event", AGENT_REPLY, message_from_row, params)

    async def rank_messages(
        self, agent_id: str, query: str, *, channels: Sequence[str], limit: int = 20
    ) -> list[DialogHit]:
        """The backend's ranking statement (`_rank_statement`), then the hits' conversations
        by id, in one read of its own (a search, like memory's keyword recall)."""
        words = fts_any_words(query)
        wanted = list(dict.fromkeys(channels))
        if words is None or limit <= 0 or not wanted:
            return []
        statement = self._rank_statement(agent_id, words, wanted, limit)

        def work(connection: Connection) -> list[DialogHit]:
            rows = connection.execute(statement).all()
            if not rows:
                return []
            ids = list({row.conversation_id for row in rows})
            found = connection.execute(
                select(conversations).where(conversations.c.agent_id == agent_id, conversations.c.id.in_(ids))
            ).all()
            by_id = {row.id: conversation_from_row(row) for row in found}
            return [
                DialogHit(
                    message=message_from_row(row), conversation=by_id[row.conversation_id], score=row.score
                )
                for row in rows
                if row.conversation_id in by_id
            ]

        return await self._search("rank_messages", work)

    def _rank_statement(
        self, agent_id: str, words: Sequence[str], channels: Sequence[str], limit: int
    ) -> TextualSelect:
        """The messages' columns and `score` (higher is better) of the best `limit` matches of
        any of `words` on `channels`, roles user and agent, dialog conversations only."""
        raise NotImplementedError

    async def count_messages(self, agent_id: str) -> int:
        statement = select(func.count()).select_from(messages).where(messages.c.agent_id == agent_id)
        return await self._read("count_messages", lambda c: int(c.execute(statement).scalar_one()))

    async def purge_dialog(self, agent_id: str, before: datetime) -> int:
        agent_id = checked_id(agent_id, "agent id")
        closed = select(conversations.c.id).where(
            conversations.c.agent_id == agent_id,
            conversations.c.closed_at.is_not(None),
            conversations.c.closed_at < before,
        )
        statement = delete(messages).where(
            messages.c.agent_id == agent_id,
            messages.c.created_at < before,
            messages.c.conversation_id.in_(closed),
        )
        return await self._write("purge_dialog", lambda c: int(c.execute(statement).rowcount or 0))

    async def forget_messages(self, agent_id: str, message_ids: Sequence[str]) -> int:
        agent_id = checked_id(agent_id, "agent id")
        wanted = list(dict.fromkeys(message_ids))
        if not wanted:
            return 0

        def work(connection: Connection) -> int:
            deleted = 0
            for start in range(0, len(wanted), _CHUNK):
                statement = delete(messages).where(
                    messages.c.agent_id == agent_id, messages.c.id.in_(wanted[start : start + _CHUNK])
                )
                deleted += int(connection.execute(statement).rowcount or 0)
            return deleted

        return await self._write("forget_messages", work)

    async def held_attachments(self, agent_id: str) -> set[str]:
        agent_id = checked_id(agent_id, "agent id")

        def work(connection: Connection) -> set[str]:
            with_files = connection.execute(
                select(events.c.id, events.c.received_at, events.c.attachments).where(
                    events.c.agent_id == agent_id, cast(events.c.attachments, Text) != "[]"
                )
            ).all()
            if not with_files:
                return set()
            in_dialog: set[str] = set()
            ids = [row.id for row in with_files]
            for start in range(0, len(ids), _CHUNK):
                in_dialog.update(
                    connection.execute(
                        select(messages.c.event_id).where(
                            messages.c.agent_id == agent_id,
                            messages.c.event_id.in_(ids[start : start + _CHUNK]),
                        )
                    ).scalars()
                )
            # The memories' `message_ids` are matched in the database (a JSON array's elements as
            # rows: SQLite's `json_each`, PostgreSQL's `json_array_elements_text`), against the
            # input messages of these events only: no memory's list comes to Python.
            inbound = [
                inbound_message_id(row.id, row.received_at) for row in with_files if row.id not in in_dialog
            ]
            remembered: set[str] = set()
            for start in range(0, len(inbound), _CHUNK):
                remembered.update(
                    connection.execute(
                        _remembered(connection.dialect.name, agent_id, inbound[start : start + _CHUNK])
                    ).scalars()
                )
            held: set[str] = set()
            for row in with_files:
                if row.id in in_dialog or inbound_message_id(row.id, row.received_at) in remembered:
                    held.update(str(item["reference"]) for item in row.attachments or ())
            return held

        return await self._read("held_attachments", work)


# What `rank_messages` keeps besides the match, in every backend's statement: a message of a
# dialog conversation on one of the channels, said by someone or by the agent (not a
# reminder or notice folded into the dialog).
RANK_FILTER = (
    "messages.agent_id = :agent_id AND messages.role IN ('user', 'agent') "
    "AND conv.kind = 'dialog' AND conv.service || ':' || conv.channel IN :channels"
)
RANK_JOIN = (
    "JOIN conversations AS conv ON conv.agent_id = messages.agent_id AND conv.id = messages.conversation_id"
)
MESSAGE_COLUMNS = ", ".join(f"messages.{c.name}" for c in messages.c)

_CHUNK = 500  # event ids per IN list (well under every backend's parameter limit)


def _remembered(dialect: str, agent_id: str, message_ids: Sequence[str]) -> Select[Any]:
    """Which of `message_ids` some memory record of the agent names in its `message_ids`."""
    elements = (
        (
            func.json_each(memory_records.c.message_ids)
            if dialect == "sqlite"
            else func.json_array_elements_text(memory_records.c.message_ids)
        )
        .table_valued("value")
        .alias("named")
    )
    return (
        select(elements.c.value)
        .select_from(memory_records)
        .join(elements, true())
        .where(memory_records.c.agent_id == agent_id, elements.c.value.in_(message_ids))
        .distinct()
    )


def _utc(when: datetime) -> datetime:
    """Aware UTC, taking a naive time as UTC (as `ManualClock` and `UTCDateTime` do)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _unique(ids: Iterable[str]) -> list[str]:
    """Distinct ids in first-seen order."""
    return list(dict.fromkeys(ids))


def open_conversation_row(
    connection: Connection,
    agent_id: str,
    service: str,
    channel: str,
    participant_ids: Sequence[str],
    now: datetime,
    idle_timeout_seconds: float,
    kind: str,
) -> Conversation:
    now = _utc(now)
    participants = _unique(participant_ids)
    idle = timedelta(seconds=idle_timeout_seconds)
    params = {"p_agent_id": agent_id, "p_service": service, "p_channel": channel, "p_kind": kind}
    row = connection.execute(_SQL_OPEN_CONVERSATION, params).first()
    if row is not None and (now - row.last_activity_at > idle or row.last_activity_at - now > _AHEAD):
        ended = max(now, row.last_activity_at)
        connection.execute(update(conversations).where(conversations.c.id == row.id).values(closed_at=ended))
        row = None
    if row is not None:
        joined = {"p_id": row.id, "p_participants": _unique([*row.participants, *participants]), "p_now": now}
        conversation = conversation_from_row(connection.execute(_SQL_JOIN_CONVERSATION, joined).one())
        joining = [p for p in participants if p not in row.participants]
        index_participants(connection, agent_id, conversation, joining)  # usually none: no write
        return conversation
    statement = insert(conversations).values(
        id=new_id(now), agent_id=agent_id, service=service, channel=channel, kind=kind,
        participants=participants, started_at=now, last_activity_at=now, closed_at=None,
    )  # fmt: skip
    conversation = conversation_from_row(connection.execute(statement.returning(*conversations.c)).one())
    index_participants(connection, agent_id, conversation, participants)
    return conversation


def add_message_row(connection: Connection, message: Message) -> bool:
    values = message.model_dump()
    values["role"] = message.role.value
    # No conflict target: the primary key and the partial unique index on AGENT replies
    # per event_id both make the insert a no-op.
    if connection.execute(_SQL_ADD_MESSAGE, values).rowcount != 1:
        return False
    touch = {"p_agent_id": message.agent_id, "p_id": message.conversation_id, "p_now": message.created_at}
    connection.execute(_SQL_TOUCH_CONVERSATION, touch)
    return True


# A conversation last active further ahead of this clock than hosts' clocks drift apart
# was written under a clock moved forward (`persyn --now <later> ...`). Dialog is read in
# time order, so continuing it would put everything said from now on before those rows:
# it ends (when it was last active), and a new conversation begins.
_AHEAD = timedelta(minutes=1)


_SQL_OPEN_CONVERSATION = select(conversations).where(
    conversations.c.agent_id == p("agent_id"),
    conversations.c.service == p("service"),
    conversations.c.channel == p("channel"),
    conversations.c.kind == p("kind"),
    conversations.c.closed_at.is_(None),
)


_SQL_CONVERSATION = select(conversations).where(
    conversations.c.agent_id == p("agent_id"), conversations.c.id == p("id")
)


_SQL_ADD_MESSAGE = insert(messages).on_conflict_do_nothing()


_SQL_TOUCH_CONVERSATION = (
    update(conversations)
    .where(
        conversations.c.agent_id == p("agent_id"),
        conversations.c.id == p("id"),
        conversations.c.closed_at.is_(None),
    )
    .values(
        last_activity_at=latest(conversations.c.last_activity_at, p("now", conversations.c.last_activity_at))
    )
)


_SQL_JOIN_CONVERSATION = (
    update(conversations)
    .where(conversations.c.id == p("id"))
    .values(
        participants=p("participants", conversations.c.participants),
        last_activity_at=latest(conversations.c.last_activity_at, p("now", conversations.c.last_activity_at)),
    )
    .returning(*conversations.c)
)


# The role as a literal, not a parameter: only then can SQLite use the partial unique index
# on agent replies (otherwise it scans the agent's messages).
AGENT_REPLY = select(messages).where(
    messages.c.agent_id == p("agent_id"),
    messages.c.event_id == p("event_id"),
    messages.c.role == literal_column(f"'{Role.AGENT.value}'"),
)


# The input first, then the newest others: one read whatever was stored after the input.
_SQL_TURN_MESSAGES = (
    select(messages)
    .where(messages.c.agent_id == p("agent_id"), messages.c.conversation_id == p("conversation_id"))
    .order_by(
        case((messages.c.id == p("input"), 0), else_=1),
        messages.c.created_at.desc(),
        messages.c.id.desc(),
    )
    .limit(p("limit"))
)


_SQL_RECENT_MESSAGES = (
    select(messages)
    .where(messages.c.agent_id == p("agent_id"), messages.c.conversation_id == p("conversation_id"))
    .order_by(messages.c.created_at.desc(), messages.c.id.desc())
    .limit(p("limit"))
)


_SQL_CHANNEL_MESSAGES = (
    select(messages)
    .where(
        messages.c.agent_id == p("agent_id"),
        messages.c.conversation_id.in_(
            select(conversations.c.id)
            .where(
                conversations.c.agent_id == p("agent_id"),
                conversations.c.service == p("service"),
                conversations.c.channel == p("channel"),
            )
            .scalar_subquery()
        ),
    )
    .order_by(messages.c.created_at.desc(), messages.c.id.desc())
    .limit(p("limit"))
)
