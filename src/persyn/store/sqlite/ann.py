"""Sub-linear vector search in one large compartment (ARCHITECTURE §7.1; issue 20 item 5).

sqlite-vec's kNN (`vectors.py`) is exact and costs about half a microsecond per
stored vector: 85 ms at 100k records in ONE channel, half a second at 1M. A partition (an
agent's channel, one vector size) of `EXACT_BELOW` vectors or more is searched here
instead, in three steps:

1. **Binary codes, scanned by Hamming distance.** Each vector is coded as the signs of
   `code_bits(dims)` random projections (2 x dims, at most 512) of the vector minus the
   partition's mean. Subtracting the mean matters: embeddings share a large common
   direction, and uncentred sign bits spend most of their information on it. Two
   projections per dimension (rather than the coordinates' own signs) halve the candidates
   needed for the same recall. The `candidates(k, n)` codes nearest the query's code
   (5 x sqrt(n)) are chosen by a threshold on the Hamming histogram, not a sort.
2. **An int8 re-rank in memory.** Each entry also holds the vector in int8 with its scale
   (cosine error ~1e-3): the candidates are ordered by it without any I/O.
3. **An exact re-rank** of the best k + k/4 + 10, read as float32 by integer id from
   `memory_ann_units`. The distances returned are exact; only the candidate set is
   approximate: recall@10 against exact search >= 0.98 on the benchmark's data.

The entries live packed in blocks of `BLOCK` (`memory_ann_blocks`: one blob of entries,
one of unit-row ids), which a store caches in memory per partition and re-reads only when
a block changed (each block carries a version, read on every search). Per vector that is
dims + 4 + code_bits/8 + 8 bytes: 332 MB of memory at 1M 256-d vectors in one channel, and
a scan of ~15 ms. Reading float32 vectors for every candidate instead cost ~20 us a row
(a random page each), which is why the int8 copy exists.

Access rules: the re-rank reads candidates with `agent_id = ? AND channel = ?` in the SQL,
so an id that a stale block, a bug or a corrupted blob points elsewhere can never surface a
record of another agent or another compartment.

The mean (and the projection) are stored per partition (`memory_ann_partitions`). A
partition is built (mean computed, every vector coded) when it reaches `EXACT_BELOW`
vectors. Later vectors are coded against the stored mean, appended to the last block. The
mean drifts as the partition grows, so the partition is rebuilt whenever it has doubled
since its last build, or when more than a quarter of its coded entries are stale (deleted
or replaced records: their block entries stay until the rebuild, their unit rows are gone,
so the re-rank drops them). Rebuilds are O(n) each and geometric, so amortised O(1) per
vector. Correctness never depends on the mean: a stale mean only lowers recall.

Migration 16 creates the tables and backfills them from the vec0 tables.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

__all__ = [
    "BLOCK",
    "EXACT_BELOW",
    "AnnCache",
    "NewUnit",
    "add_units",
    "backfill",
    "candidates",
    "code_bits",
    "create_tables",
    "delete_units",
    "search",
]

EXACT_BELOW = 2_000  # a smaller partition is scanned exactly by sqlite-vec: it is as fast
BLOCK = 4_096  # entries per block row: appending one vector rewrites one block (~1.3 MB at 256-d)
_MAX_CODE_BITS = 512
_CHUNK = 4 * BLOCK  # vectors per read while building (16 MB at 256-d)
_SEED = 20_261_202  # the projections are stored with the partition: the seed only starts them

Vector = np.ndarray[Any, np.dtype[np.float32]]

_DDL = (
    "CREATE TABLE memory_ann_units ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"  # never reused: a stale code can never name a new row
    " record_id TEXT NOT NULL UNIQUE,"
    " agent_id TEXT NOT NULL,"
    " channel TEXT NOT NULL,"
    " dims INTEGER NOT NULL,"
    " unit BLOB NOT NULL)",
    "CREATE INDEX ix_memory_ann_units_partition ON memory_ann_units (agent_id, channel, dims, id)",
    "CREATE TABLE memory_ann_partitions ("
    " agent_id TEXT NOT NULL,"
    " channel TEXT NOT NULL,"
    " dims INTEGER NOT NULL,"
    " vectors INTEGER NOT NULL,"  # live unit rows of the partition
    " built_at INTEGER,"  # `vectors` when the mean was last computed (NULL: not built)
    " stale INTEGER NOT NULL DEFAULT 0,"  # coded entries whose unit row is gone
    " generation INTEGER NOT NULL DEFAULT 0,"
    " mean BLOB,"
    " projection BLOB,"
    " PRIMARY KEY (agent_id, channel, dims))",
    "CREATE TABLE memory_ann_blocks ("
    " agent_id TEXT NOT NULL,"
    " channel TEXT NOT NULL,"
    " dims INTEGER NOT NULL,"
    " block INTEGER NOT NULL,"
    " version INTEGER NOT NULL,"
    " ids BLOB NOT NULL,"  # int64 memory_ann_units.id per entry
    " codes BLOB NOT NULL,"  # per entry, same order: sign bits, int8 vector, float32 scale
    " PRIMARY KEY (agent_id, channel, dims, block))",
)


def create_tables(connection: Connection) -> None:
    for statement in _DDL:
        connection.exec_driver_sql(statement)


def code_bits(dims: int) -> int:
    """Bits per code: two random projections per dimension, at most 512, a whole number
    of 64-bit words."""
    return min(_MAX_CODE_BITS, -(-2 * dims // 64) * 64)


def candidates(k: int, vectors: int) -> int:
    """How many codes go to the exact re-rank for a search of `k` in a partition of
    `vectors`. The true top 10 hide among more codes as the partition grows: 5 x sqrt(n)
    (1,581 at 100k, 5,000 at 1M) keeps recall@10 >= 0.98 on the benchmark's data. They are
    re-ranked in memory (int8), so a few thousand cost about a millisecond."""
    return max(2 * k, 200, math.ceil(5 * math.sqrt(vectors)))


@dataclass(frozen=True)
class NewUnit:
    record_id: str
    agent_id: str
    channel: str
    unit: bytes  # float32, unit length


# writing ------------------------------------------------------------------------------------------
def add_units(connection: Connection, new: Sequence[NewUnit]) -> None:
    """Keep the new vectors by id and code them into their partitions (building or
    rebuilding a partition that has reached its threshold)."""
    if not new:
        return
    connection.exec_driver_sql(
        "INSERT INTO memory_ann_units (record_id, agent_id, channel, dims, unit) VALUES (?, ?, ?, ?, ?)",
        [(u.record_id, u.agent_id, u.channel, len(u.unit) // 4, u.unit) for u in new],
    )
    by_partition: dict[tuple[str, str, int], list[NewUnit]] = {}
    for unit in new:
        by_partition.setdefault((unit.agent_id, unit.channel, len(unit.unit) // 4), []).append(unit)
    for key, units in by_partition.items():
        connection.exec_driver_sql(
            "INSERT INTO memory_ann_partitions (agent_id, channel, dims, vectors) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (agent_id, channel, dims) DO UPDATE SET vectors = vectors + excluded.vectors",
            (*key, len(units)),
        )
        _refresh(connection, key, [u.record_id for u in units])


def delete_units(connection: Connection, record_ids: Iterable[str]) -> None:
    """Forget these records' vectors. Their codes stay in the blocks (stale) until the
    partition's next rebuild; the re-rank finds no unit row for them and drops them."""
    wanted = list(dict.fromkeys(record_ids))
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        rows = connection.exec_driver_sql(
            "DELETE FROM memory_ann_units WHERE record_id IN (SELECT value FROM json_each(?)) "
            "RETURNING agent_id, channel, dims",
            (json.dumps(chunk),),
        ).all()
        gone: dict[tuple[str, str, int], int] = {}
        for row in rows:
            key = (str(row[0]), str(row[1]), int(row[2]))
            gone[key] = gone.get(key, 0) + 1
        for key, count in gone.items():
            # Only a built partition has codes to go stale.
            connection.exec_driver_sql(
                "UPDATE memory_ann_partitions SET vectors = vectors - ?, "
                "stale = stale + CASE WHEN built_at IS NULL THEN 0 ELSE ? END "
                "WHERE agent_id = ? AND channel = ? AND dims = ?",
                (count, count, *key),
            )
            _refresh(connection, key, [])


def _refresh(connection: Connection, key: tuple[str, str, int], added: Sequence[str]) -> None:
    """Build, rebuild or extend the partition's codes after a change."""
    row = connection.exec_driver_sql(
        "SELECT vectors, built_at, stale, generation, mean, projection FROM memory_ann_partitions "
        "WHERE agent_id = ? AND channel = ? AND dims = ?",
        key,
    ).one()
    vectors, built_at, stale, generation = int(row[0]), row[1], int(row[2]), int(row[3])
    if built_at is None:
        if vectors >= EXACT_BELOW:
            _build(connection, key, generation, None)
        return
    if vectors < EXACT_BELOW // 2:  # shrunk (a cull): exact again, the codes go
        connection.exec_driver_sql(
            "DELETE FROM memory_ann_blocks WHERE agent_id = ? AND channel = ? AND dims = ?", key
        )
        connection.exec_driver_sql(
            "UPDATE memory_ann_partitions SET built_at = NULL, stale = 0, mean = NULL, "
            "generation = generation + 1 WHERE agent_id = ? AND channel = ? AND dims = ?",
            key,
        )
        return
    if vectors >= 2 * int(built_at) or 4 * stale > vectors + stale:
        _build(connection, key, generation, row[5])
        return
    if added:
        mean = np.frombuffer(row[4], dtype=np.float32)
        projection = np.frombuffer(row[5], dtype=np.float32).reshape(key[2], -1)
        ids, units = _read_units(connection, key, added)
        _append(connection, key, ids, _codes(units, mean, projection))


def _build(connection: Connection, key: tuple[str, str, int], generation: int, projection: Any) -> None:
    """Compute the partition's mean from all its vectors and code them all afresh. Two
    streamed passes of `_CHUNK` vectors (a multiple of BLOCK), so memory stays bounded
    whatever the partition's size."""
    dims = key[2]
    total = np.zeros(dims, dtype=np.float64)
    count = 0
    for _, units in _unit_chunks(connection, key):
        total += units.sum(axis=0, dtype=np.float64)
        count += len(units)
    mean = (total / max(count, 1)).astype(np.float32)
    if projection is None:
        rng = np.random.default_rng(_SEED)
        matrix = rng.standard_normal((dims, code_bits(dims)), dtype=np.float32)
    else:
        matrix = np.frombuffer(projection, dtype=np.float32).reshape(dims, -1)
    connection.exec_driver_sql(
        "DELETE FROM memory_ann_blocks WHERE agent_id = ? AND channel = ? AND dims = ?", key
    )
    number = 0
    for ids, units in _unit_chunks(connection, key):
        codes = _codes(units, mean, matrix)
        rows = [
            (*key, number + i, ids[start : start + BLOCK].tobytes(), codes[start : start + BLOCK].tobytes())
            for i, start in enumerate(range(0, len(ids), BLOCK))
        ]
        connection.exec_driver_sql(
            "INSERT INTO memory_ann_blocks (agent_id, channel, dims, block, version, ids, codes) "
            "VALUES (?, ?, ?, ?, 0, ?, ?)",
            rows,
        )
        number += len(rows)
    connection.exec_driver_sql(
        "UPDATE memory_ann_partitions SET vectors = ?, built_at = ?, stale = 0, generation = ?, "
        "mean = ?, projection = ? WHERE agent_id = ? AND channel = ? AND dims = ?",
        (count, count, generation + 1, mean.tobytes(), np.ascontiguousarray(matrix).tobytes(), *key),
    )


def _unit_chunks(
    connection: Connection, key: tuple[str, str, int]
) -> Iterator[tuple[np.ndarray[Any, np.dtype[np.int64]], Vector]]:
    """The partition's vectors in id order, `_CHUNK` at a time."""
    after = 0
    while True:
        rows = connection.exec_driver_sql(
            "SELECT id, unit FROM memory_ann_units WHERE agent_id = ? AND channel = ? AND dims = ? "
            "AND id > ? ORDER BY id LIMIT ?",
            (*key, after, _CHUNK),
        ).all()
        if not rows:
            return
        ids = np.fromiter((int(row[0]) for row in rows), dtype=np.int64, count=len(rows))
        yield (
            ids,
            np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), key[2]),
        )
        after = int(ids[-1])


def _append(
    connection: Connection,
    key: tuple[str, str, int],
    ids: np.ndarray[Any, np.dtype[np.int64]],
    codes: np.ndarray[Any, np.dtype[np.uint8]],
) -> None:
    last = connection.exec_driver_sql(
        "SELECT block, ids, codes FROM memory_ann_blocks WHERE agent_id = ? AND channel = ? AND dims = ? "
        "ORDER BY block DESC LIMIT 1",
        key,
    ).first()
    width = codes.shape[1]
    if last is None:
        number, old_ids, old_codes = 0, np.zeros(0, np.int64), np.zeros((0, width), np.uint8)
    else:
        number = int(last[0])
        old_ids = np.frombuffer(last[1], dtype=np.int64)
        old_codes = np.frombuffer(last[2], dtype=np.uint8).reshape(-1, width)
    all_ids = np.concatenate([old_ids, ids])
    all_codes = np.concatenate([old_codes, codes])
    rows = [
        (
            *key,
            number + i,
            all_ids[start : start + BLOCK].tobytes(),
            all_codes[start : start + BLOCK].tobytes(),
        )
        for i, start in enumerate(range(0, len(all_ids), BLOCK))
    ]
    # A rewritten block gets a new version, so every cache re-reads it.
    connection.exec_driver_sql(
        "INSERT INTO memory_ann_blocks (agent_id, channel, dims, block, version, ids, codes) "
        "VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT (agent_id, channel, dims, block) DO UPDATE SET "
        "version = version + 1, ids = excluded.ids, codes = excluded.codes",
        rows,
    )


def _read_units(
    connection: Connection, key: tuple[str, str, int], record_ids: Sequence[str] | None
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], Vector]:
    sql = "SELECT id, unit FROM memory_ann_units WHERE agent_id = ? AND channel = ? AND dims = ?"
    params: tuple[object, ...] = key
    if record_ids is not None:
        sql += " AND record_id IN (SELECT value FROM json_each(?))"
        params = (*key, json.dumps(list(record_ids)))
    rows = connection.exec_driver_sql(sql + " ORDER BY id", params).all()
    ids = np.fromiter((int(row[0]) for row in rows), dtype=np.int64, count=len(rows))
    units = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), key[2])
    return ids, units


def _codes(units: Vector, mean: Vector, projection: Vector) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """One entry per vector: the packed sign bits of the centred vector's projections
    (`code_bits` / 8 bytes), then the vector in int8 (`dims` bytes) and its float32 scale
    (4 bytes): the bits for the scan, the int8 copy to re-rank the candidates in memory."""
    bits = projection.shape[1] // 8
    dims = projection.shape[0]
    out = np.empty((len(units), bits + dims + 4), dtype=np.uint8)
    for start in range(0, len(units), 65_536):  # bounds the float temporaries
        part = units[start : start + 65_536]
        end = start + len(part)
        out[start:end, :bits] = np.packbits(((part - mean) @ projection) > 0, axis=1)
        scale = np.maximum(np.abs(part).max(axis=1), np.float32(1e-30)) / np.float32(127)
        out[start:end, bits : bits + dims] = np.rint(part / scale[:, None]).astype(np.int8).view(np.uint8)
        out[start:end, bits + dims :] = scale.astype("<f4")[:, None].view(np.uint8)
    return out


def backfill(connection: Connection, vector_tables: Sequence[str]) -> None:
    """Migration 16: every vector already in the vec0 tables into `memory_ann_units`, then
    the partitions built as `add_units` would have built them."""
    for table in vector_tables:  # in SQL: nothing held in memory
        dims = int(table.rsplit("_", 1)[1])
        connection.exec_driver_sql(
            "INSERT INTO memory_ann_units (record_id, agent_id, channel, dims, unit) "
            f"SELECT record_id, agent_id, channel, {dims}, embedding FROM {table}"
        )
    connection.exec_driver_sql(
        "INSERT INTO memory_ann_partitions (agent_id, channel, dims, vectors) "
        "SELECT agent_id, channel, dims, count(*) FROM memory_ann_units GROUP BY agent_id, channel, dims"
    )
    for row in connection.exec_driver_sql(
        "SELECT agent_id, channel, dims FROM memory_ann_partitions WHERE vectors >= ?", (EXACT_BELOW,)
    ).all():
        _build(connection, (str(row[0]), str(row[1]), int(row[2])), 0, None)


# searching ---------------------------------------------------------------------------------------
_MERGE_ABOVE = 8  # segments: more, and the cache concatenates them all into one
_SCAN_CHUNK = 65_536  # entries scanned at a time: the Hamming temporaries stay in the CPU's cache
_PREFILTER_WORDS = 2  # the first 128 bits of a code are scanned for every entry ...
_PREFILTER = 16  # ... and about this many times the candidates wanted get the rest
_PREFILTER_SAMPLE = 65_536  # entries sampled to place the prefilter's threshold


@dataclass(frozen=True)
class _Segment:
    """Consecutive blocks' entries in contiguous arrays, with the versions they were read
    at. A block that changes (only the last one does between rebuilds: appends) is re-read
    as a segment of its own; past `_MERGE_ABOVE` segments they are concatenated into one,
    so a search scans a few long arrays rather than one short array per block (245 blocks at
    1M vectors, and a numpy call per block and word was most of the scan's time)."""

    versions: dict[int, int]  # block number -> version
    ids: np.ndarray[Any, np.dtype[np.int64]]
    words: np.ndarray[Any, np.dtype[np.uint64]]  # the sign bits, one row per 64-bit word
    fine: np.ndarray[Any, np.dtype[np.int8]]  # the vectors in int8, one row per entry
    scales: np.ndarray[Any, np.dtype[np.float32]]

    @staticmethod
    def merged(segments: Sequence[_Segment]) -> _Segment:
        ordered = sorted(segments, key=lambda segment: min(segment.versions))
        return _Segment(
            {b: v for segment in ordered for b, v in segment.versions.items()},
            np.concatenate([segment.ids for segment in ordered]),
            np.concatenate([segment.words for segment in ordered], axis=1),
            np.concatenate([segment.fine for segment in ordered]),
            np.concatenate([segment.scales for segment in ordered]),
        )


@dataclass
class _Partition:
    generation: int
    vectors: int
    mean: Vector
    projection: Vector
    segments: list[_Segment] = field(default_factory=list[_Segment])


class AnnCache:
    """A store's in-memory copy of its partitions' codes, checked against the database's
    block versions on every search (one small read), so it is never stale."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, str, int], _Partition] = {}

    def load(self, connection: Connection, key: tuple[str, str, int]) -> _Partition | None:
        row = connection.exec_driver_sql(
            "SELECT built_at, generation, mean, projection, vectors FROM memory_ann_partitions "
            "WHERE agent_id = ? AND channel = ? AND dims = ?",
            key,
        ).first()
        if row is None or row[0] is None:
            with self._lock:
                self._partitions.pop(key, None)
            return None
        with self._lock:
            cached = self._partitions.get(key)
        if cached is None or cached.generation != int(row[1]):
            cached = _Partition(
                int(row[1]),
                int(row[4]),
                np.frombuffer(row[2], dtype=np.float32),
                np.frombuffer(row[3], dtype=np.float32).reshape(key[2], -1),
            )
        versions = connection.exec_driver_sql(
            "SELECT block, version FROM memory_ann_blocks WHERE agent_id = ? AND channel = ? AND dims = ?",
            key,
        ).all()
        current = {int(block): int(version) for block, version in versions}
        # A segment is kept only if every block it holds is still there at the same version.
        segments = [
            segment
            for segment in cached.segments
            if all(current.get(b) == v for b, v in segment.versions.items())
        ]
        held = {b for segment in segments for b in segment.versions}
        changed = [b for b in current if b not in held]
        if changed:
            bits, dims = cached.projection.shape[1] // 8, key[2]
            for block, version, ids, codes in connection.exec_driver_sql(
                "SELECT block, version, ids, codes FROM memory_ann_blocks WHERE agent_id = ? AND "
                "channel = ? AND dims = ? AND block IN (SELECT value FROM json_each(?))",
                (*key, json.dumps(changed)),
            ):
                entries = np.frombuffer(codes, dtype=np.uint8).reshape(-1, bits + dims + 4)
                segments.append(
                    _Segment(
                        {int(block): int(version)},
                        np.frombuffer(ids, dtype=np.int64),
                        np.ascontiguousarray(entries[:, :bits]).view(np.uint64).T.copy(),
                        np.ascontiguousarray(entries[:, bits : bits + dims]).view(np.int8),
                        np.ascontiguousarray(entries[:, bits + dims :])
                        .view("<f4")
                        .ravel()
                        .astype(np.float32),
                    )
                )
        if len(segments) > _MERGE_ABOVE:
            segments = [_Segment.merged(segments)]
        fresh = _Partition(cached.generation, int(row[4]), cached.mean, cached.projection, segments)
        with self._lock:
            self._partitions[key] = fresh
        return fresh


def _hamming(
    words: np.ndarray[Any, np.dtype[np.uint64]], code: np.ndarray[Any, Any]
) -> np.ndarray[Any, np.dtype[np.uint16]]:
    """Each entry's Hamming distance to `code` over the words given (as many rows of
    `words` as `code` has words), a chunk of entries at a time into preallocated buffers:
    no temporary as large as the segment."""
    count = words.shape[1]
    distances = np.zeros(count, dtype=np.uint16)
    xor = np.empty(min(count, _SCAN_CHUNK), dtype=np.uint64)
    ones = np.empty(min(count, _SCAN_CHUNK), dtype=np.uint8)
    for start in range(0, count, _SCAN_CHUNK):
        end = min(count, start + _SCAN_CHUNK)
        size, out = end - start, distances[start:end]
        for word in range(len(code)):
            np.bitwise_xor(words[word, start:end], code[word], out=xor[:size])
            np.bitwise_count(xor[:size], out=ones[:size])
            np.add(out, ones[:size], out=out)
    return distances


def _prefilter(
    partition: _Partition, code: np.ndarray[Any, Any], wanted: int
) -> list[tuple[np.ndarray[Any, np.dtype[np.intp]], np.ndarray[Any, np.dtype[np.uint16]]]]:
    """Per segment, the positions of the entries worth a full Hamming distance, and those
    distances. The first `_PREFILTER_WORDS` words are scanned for every entry; only about
    `_PREFILTER` x `wanted` entries nearest on them (a threshold estimated from a sample:
    it need not be exact, it only has to keep enough) get the remaining words. At 1M
    vectors of 256-d this halved the scan's CPU time (8.6 to ~4 ms) at the same recall."""
    total = sum(len(segment.ids) for segment in partition.segments)
    keep = _PREFILTER * wanted
    if len(code) <= _PREFILTER_WORDS or total <= 2 * keep:  # too few to gain: every entry, in full
        return [
            (np.arange(len(segment.ids)), _hamming(segment.words, code)) for segment in partition.segments
        ]
    head = code[:_PREFILTER_WORDS]
    partial = [_hamming(segment.words[: len(head)], head) for segment in partition.segments]
    step = max(1, total // _PREFILTER_SAMPLE)
    sample = np.zeros(len(head) * 64 + 1, dtype=np.int64)
    for distances in partial:
        sample += np.bincount(distances[::step], minlength=len(sample))
    limit = int(np.searchsorted(sample.cumsum() * step, keep))
    # The sample may be off: widen until at least `wanted` entries are kept.
    while limit < len(sample) - 1 and sum(int(np.count_nonzero(d <= limit)) for d in partial) < wanted:
        limit += 1
    kept: list[tuple[np.ndarray[Any, np.dtype[np.intp]], np.ndarray[Any, np.dtype[np.uint16]]]] = []
    for segment, distances in zip(partition.segments, partial, strict=True):
        rows = np.flatnonzero(distances <= limit)
        full = distances[rows]
        tail = np.empty(len(rows), dtype=np.uint64)
        ones = np.empty(len(rows), dtype=np.uint8)
        for word in range(len(head), len(code)):
            np.bitwise_xor(segment.words[word].take(rows), code[word], out=tail)
            np.bitwise_count(tail, out=ones)
            np.add(full, ones, out=full)
        kept.append((rows, full))
    return kept


def search(
    connection: Connection, cache: AnnCache, agent_id: str, channel: str, unit: bytes, k: int
) -> list[tuple[str, float]] | None:
    """The k nearest of one built partition as (record_id, cosine distance), closest first;
    None if the partition is not built (the caller searches it exactly)."""
    dims = len(unit) // 4
    key = (agent_id, channel, dims)
    partition = cache.load(connection, key)
    if partition is None:
        return None
    wanted = candidates(k, partition.vectors)
    # Re-ranking a candidate costs ~20 exact comparisons (a row lookup against a scan of
    # contiguous chunks): below 16 x candidates the exact scan is as fast.
    if partition.vectors < 16 * wanted:
        return None
    query = np.frombuffer(unit, dtype=np.float32)
    code = np.packbits(((query - partition.mean) @ partition.projection) > 0).view(np.uint64)
    if not partition.segments:
        return []
    kept = _prefilter(partition, code, wanted)
    # The smallest threshold that admits `wanted` codes: a histogram, not a sort.
    histogram = np.zeros(len(code) * 64 + 1, dtype=np.int64)
    for _, distances in kept:
        histogram += np.bincount(distances, minlength=len(histogram))
    cumulative = histogram.cumsum()
    threshold = int(np.searchsorted(cumulative, wanted))
    room = wanted - (int(cumulative[threshold - 1]) if threshold > 0 else 0)  # ties at the threshold
    chosen: list[np.ndarray[Any, Any]] = []
    scores: list[np.ndarray[Any, Any]] = []
    for segment, (positions, distances) in zip(partition.segments, kept, strict=True):
        tied = np.flatnonzero(distances == threshold)[: max(room, 0)]
        room -= len(tied)
        picked = positions[np.concatenate([np.flatnonzero(distances < threshold), tied])]
        chosen.append(segment.ids[picked])
        # The candidates' cosines from their int8 copies (error ~1e-3): in memory, no I/O.
        # einsum, not `@`: a 5,000 x 256 product is large enough for OpenBLAS to wake its
        # threads, which spun for as much CPU as the whole search at 1M (measured).
        fine = segment.fine[picked].astype(np.float32)
        scores.append(segment.scales[picked] * np.einsum("ij,j->i", fine, query))
    ids = np.concatenate(chosen)
    approximate = np.concatenate(scores)
    # Only the best few are read as float32 for their exact distances: the int8 order is
    # exact but for near-ties, which the margin covers. Stale entries (deleted records)
    # find no row: then the next few are read, until k are found or none are left.
    order = ids[np.argsort(-approximate, kind="stable")]
    batch = k + k // 4 + 10
    rows: list[Any] = []
    for start in range(0, len(order), batch):
        part = order[start : start + batch].tolist()
        # Bound parameters, not json_each, and NOT INDEXED: SQLite then walks them as
        # rowid lookups (through the partition index, it took twice as long at 100k).
        # The compartment is in the WHERE: a code naming any other row finds nothing.
        rows += connection.exec_driver_sql(
            "SELECT record_id, unit FROM memory_ann_units NOT INDEXED "
            f"WHERE id IN ({', '.join('?' * len(part))}) AND agent_id = ? AND channel = ? AND dims = ?",
            (*part, agent_id, channel, dims),
        ).all()
        if len(rows) >= k:
            break
    if not rows:
        return []
    matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), dims)
    cosine = 1.0 - matrix @ query
    hits = [(str(row[0]), float(distance)) for row, distance in zip(rows, cosine, strict=True)]
    return sorted(hits, key=lambda hit: (hit[1], hit[0]))[:k]
