"""Long-term memory on SQLite (SPEC §4.1, §5): the `memory_records` methods that touch the
keyword index `memory_fts` (migration 3; the search is `keyword_index.py`) or the sqlite-vec
tables (`vectors.py`, with the binary codes of `ann.py` for large partitions), and the reads
that fetch recall's candidates as plain driver rows. The rest is the shared SQL of
`sql/memory.py`. A record, its keyword-index entry (a trigger) and its vector change in one
write transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy.engine import Connection

from persyn.core.errors import InputError, StoreError
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.ports.memory import RecallCandidate, RecallHits
from persyn.store.schema.tables import memory_records
from persyn.store.sql.memory import NewRow, SqlMemory, insert_records
from persyn.store.sql.search import fts_any_words, unit_vector
from persyn.store.sqlite import vectors as vectors
from persyn.store.sqlite.ann import AnnCache
from persyn.store.sqlite.keyword_index import keyword_hits

__all__ = ["SQLiteMemory"]

_IDS_PER_STATEMENT = 500  # well under SQLite's bound-parameter limit

_r = memory_records.c


class SQLiteMemory(SqlMemory):
    """The long-term-memory part of `SQLiteStore`."""

    @property
    def _ann_cache(self) -> AnnCache:
        """This store's in-memory copy of its large partitions' binary codes (`_sqlite_ann`)."""
        cache = self.__dict__.get("_ann_cache_instance")
        if cache is None:
            cache = self.__dict__.setdefault("_ann_cache_instance", AnnCache())
        return cache

    def _insert_rows(self, connection: Connection, rows: Sequence[NewRow]) -> list[bool]:
        """`insert_records` with this backend's vector index (a backend with another index
        overrides this one method)."""
        return insert_records(connection, rows, _put_vectors)

    async def records_by_ids(self, agent_id: str, record_ids: Sequence[str]) -> list[MemoryRecord]:
        """In newest-first order; unknown ids are skipped, a repeated id yields one record."""
        wanted = list(dict.fromkeys(record_ids))

        def work(connection: Connection) -> list[MemoryRecord]:
            # Recall fetches every candidate (~200 a query) through here: plain driver rows
            # read by `_record_from_driver_row` take half the time of SQLAlchemy's result
            # processing plus `record_from_row`.
            found: list[MemoryRecord] = []
            for chunk in _chunks(wanted):
                marks = ", ".join("?" * len(chunk))
                rows = connection.exec_driver_sql(
                    f"SELECT {_DRIVER_COLUMNS} FROM memory_records WHERE agent_id = ? AND id IN ({marks})",
                    (agent_id, *chunk),
                )
                found += [_record_from_driver_row(row) for row in rows]
            return sorted(found, key=lambda r: (r.created_at, r.id), reverse=True)

        return await self._read("records_by_ids", work)

    async def recall_candidates(self, agent_id: str, record_ids: Sequence[str]) -> list[RecallCandidate]:
        """As `records_by_ids`, each record built from its driver row only when asked for."""
        return await self._read("recall_candidates", lambda c: _candidates(c, agent_id, record_ids))

    async def delete_records(self, agent_id: str, record_ids: Sequence[str]) -> int:
        wanted = list(dict.fromkeys(record_ids))

        def work(connection: Connection) -> int:
            deleted = 0
            for chunk in _chunks(wanted):
                where = and_(_r.agent_id == agent_id, _r.id.in_(chunk))
                by_dims: dict[int, list[str]] = {}
                for row in connection.execute(select(_r.id, _r.dims).where(where, _r.dims.is_not(None))):
                    by_dims.setdefault(int(row.dims), []).append(row.id)
                for dims, ids in by_dims.items():
                    vectors.delete_vectors(connection, dims, ids)
                deleted += connection.execute(delete(memory_records).where(where)).rowcount
            return deleted

        return await self._write("delete_records", work)

    async def vector_candidates(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """At most 4096 hits (sqlite-vec's cap on k). A query vector of zeros has no
        neighbours; `channels=[]` allows no channel, so finds nothing. Each of the agent's
        channels in `channels` is searched on its own: exactly (brute force over its index
        partition, see `_sqlite_vectors`) below 2,000 vectors, through binary codes and an
        exact re-rank above (`_sqlite_ann`). The distances are exact either way."""
        unit = unit_vector(vector, "query vector")
        if unit is None or k <= 0:
            return []
        cache = self._ann_cache
        return await self._search(
            "vector_candidates", lambda c: vectors.nearest(c, agent_id, unit, k, channels, cache)
        )

    async def vector_recall(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> RecallHits:
        """The search and its candidates' rows in one read transaction on the search's
        thread: no second hop to the read batch."""
        unit = unit_vector(vector, "query vector")
        if unit is None or k <= 0:
            return RecallHits([], [])
        cache = self._ann_cache

        def work(connection: Connection) -> RecallHits:
            hits = vectors.nearest(connection, agent_id, unit, k, channels, cache)
            return RecallHits(hits, _candidates(connection, agent_id, [record_id for record_id, _ in hits]))

        return await self._search("vector_recall", work)

    async def warm_recall(self, agent_id: str) -> int:
        """Loads the codes of the agent's indexed vector partitions into this store's cache
        (`_sqlite_ann`), which the first search of each would otherwise do: ~0.3 s at 100k
        vectors in one channel, ~2.5 s and ~330 MB at 1M."""
        cache = self._ann_cache

        def work(connection: Connection) -> int:
            keys = connection.exec_driver_sql(
                "SELECT channel, dims FROM memory_ann_partitions WHERE agent_id = ? AND built_at IS NOT NULL",
                (agent_id,),
            ).all()
            return sum(
                cache.load(connection, (agent_id, str(channel), int(dims))) is not None
                for channel, dims in keys
            )

        return await self._search("warm_recall", work)

    async def keyword_candidates(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """Scores are -bm25 (column weights KEYWORD_WEIGHTS), so higher is better; ties go
        to the newer record. Stop-words are dropped from the query (see `fts_any_query`);
        `channels=[]` finds nothing."""
        words = fts_any_words(query)
        if words is None or k <= 0 or (channels is not None and not channels):
            return []
        wanted = None if channels is None else list(dict.fromkeys(channels))

        return await self._search("keyword_candidates", lambda c: keyword_hits(c, agent_id, words, k, wanted))

    async def keyword_recall(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> RecallHits:
        """The search and its candidates' rows in one read transaction on the search's thread."""
        words = fts_any_words(query)
        if words is None or k <= 0 or (channels is not None and not channels):
            return RecallHits([], [])
        wanted = None if channels is None else list(dict.fromkeys(channels))

        def work(connection: Connection) -> RecallHits:
            found = keyword_hits(connection, agent_id, words, k, wanted)
            return RecallHits(found, _candidates(connection, agent_id, [record_id for record_id, _ in found]))

        return await self._search("keyword_recall", work)

    async def set_record_vector(
        self, agent_id: str, record_id: str, vector: Sequence[float], embedding_model: str
    ) -> None:
        """Replaces whatever vector the record had, of any size or model (an all-zero
        vector replaces it with none, as in `add_record`). StoreError if the record does not
        exist; InputError for a non-finite vector."""
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
                vectors.put_vectors(
                    connection,
                    [vectors.NewVector(record_id, agent_id, row.channel, embedding_model, unit)],
                )
                dims = len(unit) // 4
            connection.execute(
                update(memory_records).where(where).values(embedding_model=embedding_model, dims=dims)
            )

        await self._write("set_record_vector", work)


def _put_vectors(connection: Connection, rows: Sequence[NewRow]) -> None:
    """The stored rows' unit vectors into sqlite-vec."""
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
    )


_DRIVER_COLUMNS = (
    "id, agent_id, created_at, channel, participant_ids, summary, importance, tags, emotion, "
    "sensitivity, conversation_id, message_ids, ref, kind"
)


def _record_from_driver_row(row: Sequence[Any]) -> MemoryRecord:
    """`record_from_row` for a plain driver row of `_DRIVER_COLUMNS`: the values as the
    schema's types store them on SQLite (UTCDateTime: naive UTC ISO text; JSON: text). The
    contract suite's round trip through `records_by_ids` checks they agree."""
    return MemoryRecord(
        id=row[0],
        agent_id=row[1],
        created_at=datetime.fromisoformat(row[2]).replace(tzinfo=UTC),
        channel=row[3],
        participant_ids=tuple(json.loads(row[4])),
        summary=row[5],
        importance=row[6],
        tags=tuple(json.loads(row[7])),
        emotion=row[8],
        sensitivity=Sensitivity(row[9]),
        conversation_id=row[10],
        message_ids=tuple(json.loads(row[11])),
        ref=row[12],
        kind=row[13],
    )


def _candidates(connection: Connection, agent_id: str, record_ids: Sequence[str]) -> list[RecallCandidate]:
    """`recall_candidates`' work: the driver rows of those of `record_ids` that exist."""
    found: list[RecallCandidate] = []
    for chunk in _chunks(list(dict.fromkeys(record_ids))):
        marks = ", ".join("?" * len(chunk))
        rows = connection.exec_driver_sql(
            f"SELECT {_DRIVER_COLUMNS} FROM memory_records WHERE agent_id = ? AND id IN ({marks})",
            (agent_id, *chunk),
        )
        found += [_candidate_from_driver_row(tuple(row)) for row in rows]
    return found


def _candidate_from_driver_row(row: tuple[Any, ...]) -> RecallCandidate:
    """What recall scores by, from a driver row of `_DRIVER_COLUMNS`; the whole record is
    built from the same row if the candidate is kept."""
    return RecallCandidate(
        id=row[0],
        created_at=datetime.fromisoformat(row[2]).replace(tzinfo=UTC),
        channel=row[3],
        participant_ids=tuple(json.loads(row[4])),
        importance=row[6],
        sensitivity=Sensitivity(row[9]),
        summary=row[5],
        tags=tuple(json.loads(row[7])),
        build=lambda: _record_from_driver_row(row),
    )


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        yield ids[start : start + _IDS_PER_STATEMENT]
