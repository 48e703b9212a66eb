"""The contact directory on SQLite (SPEC §4.5, App. B): contact addresses, and the
per-participant conversation index behind a contact's bounded digest.

`SqlDirectory` is mixed into `SQLiteStore` and runs its work through the store's `_read`
and `_write`. The module-level helpers run inside a caller's transaction: `open_conversation`
indexes participants with `index_participants`, `merge_persons` moves addresses and index
rows with `move_addresses` and `move_participant_index`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select, delete, exists, select, update
from sqlalchemy.engine import Connection

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.store.base import ContactAddress, Conversation
from persyn.store.schema.tables import (
    checked_address,
    checked_id,
    contact_addresses,
    conversation_participants,
    conversations,
    memory_records,
    persons,
)
from persyn.store.sql.dml import insert
from persyn.store.sql.mapping import conversation_from_row
from persyn.store.sql.work import SqlWork

__all__ = [
    "SqlDirectory",
    "index_participants",
    "move_addresses",
    "move_participant_index",
    "person_conversations_query",
    "require_person",
]

T = TypeVar("T")

_a = contact_addresses.c
_p = conversation_participants.c
_IDS_PER_STATEMENT = 500  # well under SQLite's bound-parameter limit


class SqlDirectory(SqlWork):
    """The directory half of `SQLiteStore`."""

    # contact addresses ---------------------------------------------------------------------
    async def add_address(self, agent_id: str, person_id: str, label: str, value: str, now: datetime) -> bool:
        agent_id = checked_id(agent_id, "agent id")
        person_id = checked_id(person_id, "person id")
        label, value = checked_address(label, value)

        def work(connection: Connection) -> bool:
            require_person(connection, agent_id, person_id)
            row = {"agent_id": agent_id, "person_id": person_id, "label": label, "value": value}
            statement = (
                insert(contact_addresses)
                .values(id=new_id(now), created_at=now, **row)
                .on_conflict_do_nothing(index_elements=[_a.agent_id, _a.person_id, _a.label, _a.value])
            )
            return connection.execute(statement).rowcount == 1

        return await self._write("add_address", work)

    async def remove_address(self, agent_id: str, person_id: str, label: str, value: str) -> bool:
        label, value = checked_address(label, value)

        def work(connection: Connection) -> bool:
            require_person(connection, agent_id, person_id)
            statement = delete(contact_addresses).where(
                _a.agent_id == agent_id, _a.person_id == person_id, _a.label == label, _a.value == value
            )
            return connection.execute(statement).rowcount == 1

        return await self._write("remove_address", work)

    async def addresses(self, agent_id: str, person_id: str | None = None) -> list[ContactAddress]:
        statement = select(contact_addresses).where(_a.agent_id == agent_id)
        if person_id is not None:
            statement = statement.where(_a.person_id == person_id)
        statement = statement.order_by(_a.created_at, _a.id)

        def work(connection: Connection) -> list[ContactAddress]:
            return [
                ContactAddress(person_id=r.person_id, label=r.label, value=r.value, created_at=r.created_at)
                for r in connection.execute(statement)
            ]

        return await self._read("addresses", work)

    # the participant index --------------------------------------------------------------
    async def person_conversations(self, agent_id: str, person_id: str, limit: int) -> list[Conversation]:
        if limit <= 0:
            return []
        statement = person_conversations_query(agent_id, person_id, limit)
        return await self._read(
            "person_conversations", lambda c: [conversation_from_row(row) for row in c.execute(statement)]
        )

    async def conversation_summaries(self, agent_id: str, conversation_ids: Sequence[str]) -> dict[str, str]:
        """Looked up by the (agent_id, conversation_id) index of migration 8."""
        wanted = list(dict.fromkeys(conversation_ids))
        records = memory_records.c

        def work(connection: Connection) -> dict[str, str]:
            found: dict[str, str] = {}
            for start in range(0, len(wanted), _IDS_PER_STATEMENT):
                statement = (
                    select(records.conversation_id, records.summary)
                    .where(
                        records.agent_id == agent_id,
                        records.conversation_id.in_(wanted[start : start + _IDS_PER_STATEMENT]),
                    )
                    .order_by(records.created_at.desc(), records.id.desc())
                )
                for row in connection.execute(statement):
                    found.setdefault(row.conversation_id, row.summary)
            return found

        if not wanted:
            return {}
        return await self._read("conversation_summaries", work)


def person_conversations_query(agent_id: str, person_id: str, limit: int) -> Select[Any]:
    """A walk down the (agent_id, person_id, started_at, conversation_id) index that stops
    after `limit` rows, each joined to its conversation by primary key: no sort, no scan."""
    return (
        select(conversations)
        .join_from(
            conversation_participants,
            conversations,
            (conversations.c.agent_id == _p.agent_id) & (conversations.c.id == _p.conversation_id),
        )
        .where(_p.agent_id == agent_id, _p.person_id == person_id)
        .order_by(_p.started_at.desc(), _p.conversation_id.desc())
        .limit(limit)
    )


# inside a caller's transaction ----------------------------------------------------------------
def index_participants(
    connection: Connection, agent_id: str, conversation: Conversation, person_ids: Sequence[str]
) -> None:
    """Record that `person_ids` take part in `conversation` (those already indexed stay)."""
    if not person_ids:
        return
    rows = [
        {
            "id": new_id(conversation.started_at),
            "agent_id": agent_id,
            "conversation_id": conversation.id,
            "person_id": person_id,
            "started_at": conversation.started_at,
        }
        for person_id in person_ids
    ]
    connection.execute(
        insert(conversation_participants).on_conflict_do_nothing(
            index_elements=[_p.agent_id, _p.conversation_id, _p.person_id]
        ),
        rows,
    )


def move_participant_index(connection: Connection, agent_id: str, other_id: str, survivor_id: str) -> None:
    """A merge: `other`'s index rows become the survivor's (once per conversation)."""
    survivor_rows = conversation_participants.alias("survivor_rows")
    both = exists().where(
        survivor_rows.c.agent_id == agent_id,
        survivor_rows.c.person_id == survivor_id,
        survivor_rows.c.conversation_id == _p.conversation_id,
    )
    connection.execute(
        delete(conversation_participants).where(_p.agent_id == agent_id, _p.person_id == other_id, both)
    )
    connection.execute(
        update(conversation_participants)
        .where(_p.agent_id == agent_id, _p.person_id == other_id)
        .values(person_id=survivor_id)
    )


def move_addresses(connection: Connection, agent_id: str, other_id: str, survivor_id: str) -> None:
    """A merge: `other`'s addresses become the survivor's; one both had is kept once."""
    kept = contact_addresses.alias("kept")
    both = exists().where(
        kept.c.agent_id == agent_id,
        kept.c.person_id == survivor_id,
        kept.c.label == _a.label,
        kept.c.value == _a.value,
    )
    connection.execute(
        delete(contact_addresses).where(_a.agent_id == agent_id, _a.person_id == other_id, both)
    )
    connection.execute(
        update(contact_addresses)
        .where(_a.agent_id == agent_id, _a.person_id == other_id)
        .values(person_id=survivor_id)
    )


def require_person(connection: Connection, agent_id: str, person_id: str) -> Any:
    """The person's row; a person this agent does not know is a StoreError."""
    row = connection.execute(
        select(persons).where(persons.c.agent_id == agent_id, persons.c.id == person_id)
    ).first()
    if row is None:
        raise StoreError(f"no contact {person_id!r} for agent {agent_id!r}")
    return row
