"""Long-term memory (SPEC §4.1, §5) in the SQL both backends run: the `Store` methods over
`memory_records` that touch neither a keyword index nor a vector index. Each backend adds
its own search, vector writes and candidate reads (`sqlite/memory.py`, `postgres/memory.py`)
and the `_insert_rows` that puts a batch's vectors into its index.

`SqlMemory` runs its work through the store's `_read` and `_write` (`sql/work.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import and_, bindparam, cast, func, or_, select, true, update
from sqlalchemy.engine import Connection
from sqlalchemy.types import Text

from persyn.core.errors import InputError
from persyn.core.ids import id_time, is_id, new_id
from persyn.core.records import MemoryRecord
from persyn.store.base import ImportedMemory
from persyn.store.schema.tables import checked_id, conversations, flags, memory_records, messages
from persyn.store.sql.directory import index_participants
from persyn.store.sql.dml import insert
from persyn.store.sql.jobs import consolidated_at_import
from persyn.store.sql.mapping import record_from_row, record_values
from persyn.store.sql.search import unit_vector
from persyn.store.sql.work import SqlWork

__all__ = ["NewRow", "SqlMemory", "insert_records", "replace_record_participant"]

T = TypeVar("T")

_r = memory_records.c
_SQL_NEWEST_RECORDS = (
    select(memory_records)
    .where(_r.agent_id == bindparam("p_agent_id"))
    .order_by(_r.created_at.desc(), _r.id.desc())
    .limit(bindparam("p_limit"))
)


class SqlMemory(SqlWork):
    """The long-term-memory part of `SqlStore`, the indexes excepted."""

    async def add_record(
        self, record: MemoryRecord, vector: Sequence[float] | None, embedding_model: str | None
    ) -> bool:
        """A vector needs its `embedding_model`; a non-finite one is an InputError and
        nothing is stored. An all-zero vector (no direction: cosine cannot compare it) is
        kept as "encoded by that model, no vector": vector search never finds the record,
        and `records_needing_vectors` does not offer it again for the same model."""
        rows = [_new_row(record, vector, embedding_model)]
        [added] = await self._write("add_record", lambda c: self._insert_rows(c, rows))
        return added

    async def add_records(
        self,
        records: Sequence[MemoryRecord],
        vectors: Sequence[Sequence[float] | None] | None,
        embedding_model: str | None,
    ) -> list[bool]:
        """Each record as `add_record` would store it, all in one write transaction: one
        multi-row INSERT per few hundred records and one executemany into the vector index,
        instead of one transaction per record."""
        if vectors is not None and len(vectors) != len(records):
            raise InputError(f"{len(records)} records but {len(vectors)} vectors: one per record (or None)")
        rows = [
            _new_row(record, None if vectors is None else vectors[i], embedding_model)
            for i, record in enumerate(records)
        ]
        if not rows:
            return []
        return await self._write("add_records", lambda c: self._insert_rows(c, rows))

    async def add_imported(self, items: Sequence[ImportedMemory], embedding_model: str | None) -> list[bool]:
        """Everything is checked before the write transaction starts, so bad input (an
        InputError) stores nothing of the batch."""
        rows = [_new_row(item.record, item.vector, embedding_model) for item in items]
        if not rows:
            return []

        def work(connection: Connection) -> list[bool]:
            for item in items:
                _insert_imported_dialog(connection, item)
            return self._insert_rows(connection, rows)

        return await self._write("add_imported", work)

    def _insert_rows(self, connection: Connection, rows: Sequence[NewRow]) -> list[bool]:
        """`insert_records` with this backend's vector index."""
        raise NotImplementedError

    async def link_record_messages(self, agent_id: str, record_id: str, message_ids: Sequence[str]) -> bool:
        for message_id in message_ids:
            checked_id(message_id, "message id")
        statement = (
            update(memory_records)
            .where(_r.agent_id == agent_id, _r.id == record_id)
            .values(message_ids=list(message_ids))
        )
        return await self._write("link_record_messages", lambda c: c.execute(statement).rowcount == 1)

    async def get_record(self, agent_id: str, record_id: str) -> MemoryRecord | None:
        statement = select(memory_records).where(_r.agent_id == agent_id, _r.id == record_id)
        return await self._read("get_record", lambda c: _first_record(c, statement))

    async def get_record_by_ref(self, agent_id: str, ref: str) -> MemoryRecord | None:
        statement = select(memory_records).where(_r.agent_id == agent_id, _r.ref == ref)
        return await self._read("get_record_by_ref", lambda c: _first_record(c, statement))

    async def list_records(
        self, agent_id: str, *, limit: int = 50, before_id: str | None = None
    ) -> list[MemoryRecord]:
        """Newest first by (created_at, id). `before_id` continues after that record; if it
        has gone meanwhile (culled), after the time its ULID carries."""
        if limit <= 0:
            return []

        def work(connection: Connection) -> list[MemoryRecord]:
            if before_id is None:  # the newest (recall asks on every turn whether any exist)
                rows = connection.execute(_SQL_NEWEST_RECORDS, {"p_agent_id": agent_id, "p_limit": limit})
                return [record_from_row(row) for row in rows]
            statement = select(memory_records).where(_r.agent_id == agent_id)
            statement = statement.where(_before(connection, agent_id, before_id))
            statement = statement.order_by(_r.created_at.desc(), _r.id.desc()).limit(limit)
            return [record_from_row(row) for row in connection.execute(statement)]

        return await self._read("list_records", work)

    async def count_records(self, agent_id: str) -> int:
        statement = select(func.count()).select_from(memory_records).where(_r.agent_id == agent_id)
        return await self._read("count_records", lambda c: int(c.execute(statement).scalar_one()))

    async def record_stats(self, agent_id: str) -> dict[str, object]:
        """Keys: `count`; `by_channel`, `by_sensitivity`, `by_kind` (name -> count);
        `by_importance` (1..10 -> count); `oldest`, `newest` (created_at, None when empty);
        `vectors_by_model` (model -> count); `vectors_by_dims` (dims -> count);
        `without_vector` (count)."""

        def grouped(connection: Connection, column: Any) -> dict[Any, int]:
            statement = (
                select(column, func.count())
                .where(_r.agent_id == agent_id, column.is_not(None))
                .where(_r.dims.is_not(None) if column is _r.embedding_model else true())
                .group_by(column)
                .order_by(column)
            )
            return {key: int(count) for key, count in connection.execute(statement)}

        def work(connection: Connection) -> dict[str, object]:
            totals = connection.execute(
                select(
                    func.count(),
                    func.min(_r.created_at),
                    func.max(_r.created_at),
                    func.count(_r.dims),
                ).where(_r.agent_id == agent_id)
            ).one()
            count, oldest, newest, with_vector = totals  # min/max keep the column type: aware UTC
            return {
                "count": int(count),
                "by_channel": grouped(connection, _r.channel),
                "by_sensitivity": grouped(connection, _r.sensitivity),
                "by_importance": grouped(connection, _r.importance),
                "by_kind": grouped(connection, _r.kind),
                "oldest": oldest,
                "newest": newest,
                "vectors_by_model": grouped(connection, _r.embedding_model),
                "vectors_by_dims": grouped(connection, _r.dims),
                "without_vector": int(count) - int(with_vector),
            }

        return await self._read("record_stats", work)

    async def records_needing_vectors(
        self, agent_id: str, embedding_model: str, limit: int
    ) -> list[MemoryRecord]:
        """Newest first, so a reindex makes recent memories searchable first."""
        if limit <= 0:
            return []
        statement = (
            select(memory_records)
            .where(
                _r.agent_id == agent_id,
                or_(_r.embedding_model.is_(None), _r.embedding_model != embedding_model),
            )
            .order_by(_r.created_at.desc(), _r.id.desc())
            .limit(limit)
        )
        return await self._read("records_needing_vectors", lambda c: _records(c, statement))

    async def cull_candidates(
        self, agent_id: str, *, below_importance: int, older_than: datetime
    ) -> list[MemoryRecord]:
        """Oldest first. Both bounds are strict."""
        statement = (
            select(memory_records)
            .where(_r.agent_id == agent_id, _r.importance < below_importance, _r.created_at < older_than)
            .order_by(_r.created_at, _r.id)
        )
        return await self._read("cull_candidates", lambda c: _records(c, statement))

    async def replace_participant(self, agent_id: str, old_person_id: str, new_person_id: str) -> int:
        """Every `old_person_id` becomes `new_person_id`; a record that already had both
        keeps one (first position)."""
        new_person_id = checked_id(new_person_id, "person id")
        if old_person_id == new_person_id:
            return 0
        return await self._write(
            "replace_participant",
            lambda connection: replace_record_participant(connection, agent_id, old_person_id, new_person_id),
        )


# helpers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewRow:
    """A checked record on its way in: its `memory_records` values and unit vector."""

    values: dict[str, Any]
    unit: bytes | None


def _new_row(record: MemoryRecord, vector: Sequence[float] | None, embedding_model: str | None) -> NewRow:
    """Checks everything before any write, so bad input stores nothing."""
    _check_record_ids(record)
    values = record_values(record)
    values.update(embedding_model=None, dims=None)  # every row of a batch has the same keys
    unit = None
    if vector is not None:
        if not embedding_model:
            raise InputError(f"record {record.id!r}: a vector needs its embedding model name")
        unit = unit_vector(vector, f"vector of record {record.id!r}")
        values.update(embedding_model=embedding_model, dims=None if unit is None else len(vector))
    return NewRow(values, unit)


def insert_records(
    connection: Connection,
    rows: Sequence[NewRow],
    put_vectors: Callable[[Connection, Sequence[NewRow]], None],
) -> list[bool]:
    """Insert `rows` (and their vectors); per row, whether it was stored. A row whose id or
    (agent, ref) is taken — in the database or earlier in `rows` — is skipped."""
    ids: set[str] = set()
    refs: set[tuple[str, str]] = set()
    first = [False] * len(rows)  # not preceded in `rows` by a row with its id or ref
    for index, row in enumerate(rows):
        ref = row.values["ref"]
        key = (row.values["agent_id"], ref)
        if row.values["id"] in ids or (ref is not None and key in refs):
            continue
        ids.add(row.values["id"])
        if ref is not None:
            refs.add(key)
        first[index] = True
    fresh = [row for row, is_first in zip(rows, first, strict=True) if is_first]
    # No conflict target: the primary key and unique (agent_id, ref) both make it a no-op.
    # RETURNING names the rows stored; SQLAlchemy batches them into multi-row INSERTs.
    statement = insert(memory_records).on_conflict_do_nothing().returning(_r.id)
    stored = (
        set(connection.execute(statement, [row.values for row in fresh]).scalars()) if fresh else set[str]()
    )
    put_vectors(connection, [row for row in fresh if row.unit is not None and row.values["id"] in stored])
    return [is_first and row.values["id"] in stored for row, is_first in zip(rows, first, strict=True)]


def _insert_imported_dialog(connection: Connection, item: ImportedMemory) -> None:
    """An imported line's conversation, participant index, messages and flags; each kept as
    it is when it already exists (a re-run after a kill adds only what is missing)."""
    conversation = item.conversation
    agent_id = item.record.agent_id
    if conversation is not None:
        connection.execute(
            insert(conversations).on_conflict_do_nothing(),
            {
                "id": conversation.id,
                "agent_id": agent_id,
                "service": conversation.service,
                "channel": conversation.channel,
                "kind": conversation.kind,
                "participants": list(conversation.participant_ids),
                "started_at": conversation.started_at,
                "last_activity_at": conversation.last_activity_at,
                "closed_at": conversation.closed_at,
            },
        )
        index_participants(connection, agent_id, conversation, conversation.participant_ids)
        consolidated_at_import(connection, agent_id, conversation.id, conversation.last_activity_at)
    if item.messages:
        rows: list[dict[str, Any]] = []
        for message in item.messages:
            values = message.model_dump()
            values["role"] = message.role.value
            rows.append(values)
        connection.execute(insert(messages).on_conflict_do_nothing(), rows)
    for key, value in item.flags:
        connection.execute(
            insert(flags).on_conflict_do_nothing(),
            {"id": new_id(), "agent_id": agent_id, "key": key, "value": value},
        )


def _check_record_ids(record: MemoryRecord) -> None:
    checked_id(record.id, "record id")
    checked_id(record.agent_id, "agent id")
    if record.conversation_id is not None:
        checked_id(record.conversation_id, "conversation id")
    for person_id in record.participant_ids:
        checked_id(person_id, "participant id")
    for message_id in record.message_ids:
        checked_id(message_id, "message id")


def _first_record(connection: Connection, statement: Any) -> MemoryRecord | None:
    row = connection.execute(statement).first()
    return None if row is None else record_from_row(row)


def _records(connection: Connection, statement: Any) -> list[MemoryRecord]:
    return [record_from_row(row) for row in connection.execute(statement)]


def _before(connection: Connection, agent_id: str, before_id: str) -> Any:
    """Rows after the cursor `before_id` in newest-first (created_at, id) order."""
    row = connection.execute(select(_r.created_at).where(_r.agent_id == agent_id, _r.id == before_id)).first()
    if row is not None:
        at = row.created_at
    elif is_id(before_id):
        at = id_time(before_id)
    else:
        raise InputError(f"invalid paging cursor {before_id!r}: expected a record id")
    return or_(_r.created_at < at, and_(_r.created_at == at, _r.id < before_id))


def replace_record_participant(
    connection: Connection, agent_id: str, old_person_id: str, new_person_id: str
) -> int:
    """`replace_participant` inside a caller's transaction (a contact merge uses it too)."""
    # A ULID has no LIKE wildcards; the LIKE only narrows, the list decides.
    pattern = f'%"{old_person_id}"%'
    rows = connection.execute(
        select(_r.id, _r.participant_ids).where(
            _r.agent_id == agent_id, cast(_r.participant_ids, Text).like(pattern)
        )
    ).all()
    changed = 0
    for row in rows:
        before = list(row.participant_ids)
        if old_person_id not in before:
            continue
        after = list(dict.fromkeys(new_person_id if p == old_person_id else p for p in before))
        connection.execute(
            update(memory_records)
            .where(_r.agent_id == agent_id, _r.id == row.id)
            .values(participant_ids=after)
        )
        changed += 1
    return changed
