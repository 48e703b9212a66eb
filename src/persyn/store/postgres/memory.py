"""Long-term memory on PostgreSQL: the `memory_records` methods that touch the keyword index
(the `search_tsv` column, migration 3's PostgreSQL variant) or the vectors (pgvector,
`vectors.py`). The rest is the shared SQL of `sql/memory.py`. A record and its
vector change in one write transaction, as on SQLite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC
from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy.engine import URL, Connection

from persyn.core.errors import InputError, StoreError
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.ports.memory import RecallCandidate, RecallHits
from persyn.store.postgres import keyword_index as keyword
from persyn.store.postgres import vectors as vectors
from persyn.store.schema.tables import memory_records
from persyn.store.sql.mapping import record_from_row
from persyn.store.sql.memory import NewRow, SqlMemory, insert_records
from persyn.store.sql.search import fts_any_words, unit_vector

__all__ = ["PostgresMemory", "any_words"]

_r = memory_records.c


def any_words(query: str) -> str | None:
    """The words `fts_any_words` keeps (stop-words dropped unless nothing else is left),
    space-separated: runs of letters and digits, which `to_tsvector` reads as they are."""
    words = fts_any_words(query)
    return None if words is None else " ".join(words)


class PostgresMemory(SqlMemory):
    """The long-term-memory part of `PostgresStore`."""

    _url: URL
    _bulk: vectors.BulkVectorLoad | None  # the bulk load under way in this store, if any

    def _insert_rows(self, connection: Connection, rows: Sequence[NewRow]) -> list[bool]:
        # As on SQLite (ON CONFLICT DO NOTHING, which on PostgreSQL also settles a race with
        # another process's insert), into pgvector's tables.
        bulk = self._bulk
        return insert_records(connection, rows, lambda c, stored: _put_vectors(c, stored, bulk))

    @asynccontextmanager
    async def bulk_load(self, expected_records: int) -> AsyncIterator[None]:
        """See `MemoryPort.bulk_load`; the rule and the crash story are `BulkVectorLoad`'s.
        A load inside another is part of it."""
        if self._bulk is not None:
            yield
            return
        bulk = self._bulk = vectors.BulkVectorLoad(self._url, expected_records)
        try:
            yield
        finally:
            self._bulk = None
            loop = asyncio.get_running_loop()
            # Writes already queued on the writer thread may still use the load; once this
            # no-op has run on it, none does. The build runs elsewhere, so this process's
            # other writes go on meanwhile.
            await loop.run_in_executor(self._write_thread, lambda: None)
            await asyncio.to_thread(bulk.finish)

    async def recall_candidates(self, agent_id: str, record_ids: Sequence[str]) -> list[RecallCandidate]:
        """As SQLite's: plain driver rows, each record built only if recall keeps it
        (building all ~200 candidates' records through SQLAlchemy's result processing was
        12 ms of a 100k-record recall, twice per query)."""
        return await self._read("recall_candidates", lambda c: _candidates(c, agent_id, record_ids))

    async def records_by_ids(self, agent_id: str, record_ids: Sequence[str]) -> list[MemoryRecord]:
        wanted = list(dict.fromkeys(record_ids))
        if not wanted:
            return []
        statement = (
            select(memory_records)
            .where(_r.agent_id == agent_id, _r.id.in_(wanted))
            .order_by(_r.created_at.desc(), _r.id.desc())
        )
        return await self._read(
            "records_by_ids", lambda c: [record_from_row(row) for row in c.execute(statement)]
        )

    async def delete_records(self, agent_id: str, record_ids: Sequence[str]) -> int:
        """The vectors go with their records (ON DELETE CASCADE)."""
        wanted = list(dict.fromkeys(record_ids))
        if not wanted:
            return 0
        statement = delete(memory_records).where(_r.agent_id == agent_id, _r.id.in_(wanted))
        return await self._write("delete_records", lambda c: int(c.execute(statement).rowcount or 0))

    async def vector_candidates(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """At most 4096 hits, as on SQLite; see `_postgres_vectors` for the index paths."""
        unit = unit_vector(vector, "query vector")
        if unit is None or k <= 0:
            return []
        return await self._search(
            "vector_candidates", lambda c: vectors.nearest(c, agent_id, unit, k, channels)
        )

    async def vector_recall(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> RecallHits:
        """One statement: the nearest hits joined to their records' rows
        (`vectors.nearest_rows`), one snapshot, so every hit has its candidate. Recall at
        100k records in one channel spent 2.6 ms on the separate fetch of its candidates
        (a second transaction and round trip after the search)."""
        unit = unit_vector(vector, "query vector")
        if unit is None or k <= 0:
            return RecallHits([], [])

        def work(connection: Connection) -> RecallHits:
            rows = vectors.nearest_rows(connection, agent_id, unit, k, channels, _COLUMN_NAMES)
            return RecallHits(
                [(row[0], row[1]) for row in rows],
                [_candidate_from_row(row[2:]) for row in rows if row[2] is not None],
            )

        return await self._search("vector_recall", work)

    async def warm_recall(self, agent_id: str) -> int:
        """Nothing to load here: the HNSW index lives in the server's buffers."""
        del agent_id
        return 0

    async def keyword_candidates(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """BM25 over the channels searched, as on SQLite (`_postgres_keyword`), higher
        better; ties go to the newer record. `channels=[]` finds nothing."""
        words = any_words(query)
        if words is None or k <= 0 or (channels is not None and not channels):
            return []

        def work(connection: Connection) -> list[tuple[str, float]]:
            return keyword.keyword_search(connection, agent_id, words, k, channels)

        return await self._search("keyword_candidates", work)

    async def keyword_recall(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> RecallHits:
        """The search and its candidates' rows in the search's own transaction: no second
        hop to the read batch. (Ranking the records at the cut in SQL, to read the rows in
        the ranking statement itself, cost more than this fetch: +0.4 ms on a rare word,
        +8 ms on a word thousands of records tie on, 100k records.)"""
        words = any_words(query)
        if words is None or k <= 0 or (channels is not None and not channels):
            return RecallHits([], [])

        def work(connection: Connection) -> RecallHits:
            hits = keyword.keyword_search(connection, agent_id, words, k, channels)
            return RecallHits(hits, _candidates(connection, agent_id, [record_id for record_id, _ in hits]))

        return await self._search("keyword_recall", work)

    async def set_record_vector(
        self, agent_id: str, record_id: str, vector: Sequence[float], embedding_model: str
    ) -> None:
        if not embedding_model:
            raise InputError(f"record {record_id!r}: a vector needs its embedding model name")
        unit = unit_vector(vector, f"vector of record {record_id!r}")

        def work(connection: Connection) -> None:
            where = and_(_r.agent_id == agent_id, _r.id == record_id)
            row = connection.execute(select(_r.channel, _r.dims).where(where)).first()
            if row is None:
                raise StoreError(f"no memory record {record_id!r} for agent {agent_id!r}")
            if row.dims is not None:
                vectors.delete_vectors(connection, int(row.dims), [record_id])
            dims = None
            if unit is not None:
                new = vectors.NewVector(record_id, agent_id, row.channel, embedding_model, unit)
                vectors.put_vectors(connection, [new])
                dims = len(unit) // 4
            connection.execute(
                update(memory_records).where(where).values(embedding_model=embedding_model, dims=dims)
            )

        await self._write("set_record_vector", work)


def _candidates(connection: Connection, agent_id: str, record_ids: Sequence[str]) -> list[RecallCandidate]:
    """The recall candidates of those of `record_ids` that exist (any order)."""
    wanted = list(dict.fromkeys(record_ids))
    if not wanted:
        return []
    rows = connection.exec_driver_sql(
        f"SELECT {_DRIVER_COLUMNS} FROM memory_records "
        "WHERE agent_id = %(agent_id)s AND id = ANY(CAST(%(ids)s AS bpchar[]))",
        {"agent_id": agent_id, "ids": wanted},
    )
    return [_candidate_from_row(tuple(row)) for row in rows]


def _put_vectors(connection: Connection, rows: Sequence[NewRow], bulk: vectors.BulkVectorLoad | None) -> None:
    """The stored rows' unit vectors into pgvector (within `bulk`, if a load is under way)."""
    vectors.put_vectors(
        connection,
        [
            vectors.NewVector(
                row.values["id"],
                row.values["agent_id"],
                row.values["channel"],
                row.values["embedding_model"],
                row.unit,
            )
            for row in rows
            if row.unit is not None  # always set: the caller passes rows with a vector
        ],
        bulk,
    )


# `sqlite/memory._DRIVER_COLUMNS`, read as psycopg returns them: TIMESTAMPTZ as an aware
# datetime, the JSON lists as text. Text, not psycopg's parsed JSON: its loader (bytes, an
# encoding sniff, then json.loads) for three columns of 100 candidates was the largest part
# of the fetch's CPU, and `message_ids` is only parsed for the few records built in full.
_COLUMN_NAMES = (
    "id",
    "agent_id",
    "created_at",
    "channel",
    "participant_ids::text",
    "summary",
    "importance",
    "tags::text",
    "emotion",
    "sensitivity",
    "conversation_id",
    "message_ids::text",
    "ref",
    "kind",
)
_DRIVER_COLUMNS = ", ".join(_COLUMN_NAMES)


def _json_list(value: Any) -> tuple[str, ...]:
    return tuple(json.loads(value) if isinstance(value, str | bytes) else value)


def _record_from_row(row: tuple[Any, ...]) -> MemoryRecord:
    return MemoryRecord(
        id=row[0],
        agent_id=row[1],
        created_at=row[2].astimezone(UTC),
        channel=row[3],
        participant_ids=_json_list(row[4]),
        summary=row[5],
        importance=row[6],
        tags=_json_list(row[7]),
        emotion=row[8],
        sensitivity=Sensitivity(row[9]),
        conversation_id=row[10],
        message_ids=_json_list(row[11]),
        ref=row[12],
        kind=row[13],
    )


def _candidate_from_row(row: tuple[Any, ...]) -> RecallCandidate:
    return RecallCandidate(
        id=row[0],
        created_at=row[2].astimezone(UTC),
        channel=row[3],
        participant_ids=_json_list(row[4]),
        importance=row[6],
        sensitivity=Sensitivity(row[9]),
        summary=row[5],
        tags=_json_list(row[7]),
        build=lambda: _record_from_row(row),
    )
