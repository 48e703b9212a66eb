"""Record vectors in sqlite-vec (ARCHITECTURE §4): one `vec0` table per dimension.

Each table is created the first time a vector of its size is stored (migration 4 moved the
vectors of older databases into this layout):

    CREATE VIRTUAL TABLE memory_vectors_<dims> USING vec0(
        record_id text primary key,               -- memory_records.id
        agent_id text partition key,              -- the index is sharded per agent
        channel text partition key,               -- ... and per channel within the agent
        embedding float[<dims>] distance_metric=cosine,
        +embedding_model text                     -- auxiliary column (not used in queries)
        , chunk_size=256
    )

The search is exact, brute force, and reads only the vectors it must: a kNN search names
its partition — the agent, and one channel of the compartment (`agent_id = ? AND channel =
?`) — so another agent's or another compartment's vectors are never even read. A compartment
of several channels is one kNN per channel, each the k nearest of its channel; sorting their
union by distance and keeping the first k is then exactly the k nearest of the set. The
contract suite checks this (nearest-in-set with k=1; a property test against brute force).

Why partitions rather than a filter: vec0 brute force costs about half a microsecond per
stored float vector, so the agent-wide scan the filter needed took ~50 ms at 100k records.
With the channel as a partition the cost follows the compartment's size instead. (A
channel as a vec0 *metadata* column was slower still: values longer than 12 bytes are
compared through a lookup in a side table for every candidate row.) `chunk_size=256`
bounds the space an almost empty channel preallocates (a chunk holds its vectors in one
zero-filled blob: 256 KB at 256 dimensions).

Vectors are stored normalised to unit length (float32). Cosine distance does not change, and
the float32 arithmetic inside sqlite-vec can then neither overflow nor underflow. A vector
without a direction (all zeros) is never stored, and one with a non-finite component is
refused: vec0 would give either a NULL distance that sorts before every real neighbour.
vec0 caps k at 4096.

A partition of 2,000 vectors or more is searched sub-linearly instead (`ann.py`:
binary codes scanned by Hamming distance, then an exact re-rank): every vector stored here
is also kept, by integer id, in `memory_ann_units` for that re-rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from persyn.store.sql.search import check_dims
from persyn.store.sqlite import ann as ann

__all__ = [
    "MAX_K",
    "TABLE_PREFIX",
    "NewVector",
    "delete_vectors",
    "has_vector_table",
    "nearest",
    "put_vectors",
    "vector_table",
]

MAX_K = 4096  # sqlite-vec's limit for k
TABLE_PREFIX = "memory_vectors_"


def vector_table(dims: int) -> str:
    """The table holding `dims`-dimensional vectors; `dims` is checked, so the name is safe
    to splice into SQL."""
    return f"{TABLE_PREFIX}{check_dims(dims)}"


def has_vector_table(connection: Connection, dims: int) -> bool:
    statement = text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name")
    return connection.execute(statement, {"name": vector_table(dims)}).first() is not None


def _ensure_table(connection: Connection, dims: int) -> str:
    name = vector_table(dims)
    connection.exec_driver_sql(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0("
        "record_id text primary key, "
        "agent_id text partition key, "
        "channel text partition key, "
        f"embedding float[{dims}] distance_metric=cosine, "
        "+embedding_model text, "
        "chunk_size=256)"
    )
    return name


@dataclass(frozen=True)
class NewVector:
    """A record's unit vector (from `unit_vector`) on its way into the index."""

    record_id: str
    agent_id: str
    channel: str
    embedding_model: str
    vector: bytes


def put_vectors(connection: Connection, new: Sequence[NewVector]) -> None:
    """Store records' unit vectors, creating tables as needed: one executemany per size.
    No record may have a vector of its size yet."""
    by_dims: dict[int, list[dict[str, object]]] = {}
    for item in new:
        by_dims.setdefault(len(item.vector) // 4, []).append(
            {
                "record_id": item.record_id,
                "agent_id": item.agent_id,
                "embedding": item.vector,
                "channel": item.channel,
                "model": item.embedding_model,
            }
        )
    for dims, params in by_dims.items():
        name = _ensure_table(connection, dims)
        connection.execute(
            text(
                f"INSERT INTO {name}(record_id, agent_id, embedding, channel, embedding_model) "
                "VALUES (:record_id, :agent_id, :embedding, :channel, :model)"
            ),
            params,
        )
    ann.add_units(
        connection, [ann.NewUnit(item.record_id, item.agent_id, item.channel, item.vector) for item in new]
    )


def delete_vectors(connection: Connection, dims: int, record_ids: Iterable[str]) -> None:
    """Delete these records' vectors from the `dims` table (if it exists). One statement per
    id: vec0 finds a row by its primary key only through equality."""
    if not has_vector_table(connection, dims):
        return
    statement = text(f"DELETE FROM {vector_table(dims)} WHERE record_id = :record_id")
    params = [{"record_id": record_id} for record_id in record_ids]
    if params:
        connection.execute(statement, params)
        ann.delete_units(connection, [p["record_id"] for p in params])


def nearest(
    connection: Connection,
    agent_id: str,
    vector: bytes,
    k: int,
    channels: Sequence[str] | None,
    cache: ann.AnnCache | None = None,
) -> list[tuple[str, float]]:
    """The `k` records of `agent_id` (in `channels`, if given) nearest to the unit `vector`,
    as (record_id, cosine distance), closest first; ties in id order. With a `cache`, a
    channel whose partition is built is searched through its binary codes (`_sqlite_ann`);
    the agent-wide search (`channels=None`, operator tools) stays exact."""
    dims = len(vector) // 4
    k = min(k, MAX_K)
    if k <= 0 or (channels is not None and not channels) or not has_vector_table(connection, dims):
        return []
    # vec0 refuses a LIMIT beside `k`, and any ORDER BY but `distance` alone: tie order and
    # the cut to k happen here.
    sql = (
        f"SELECT record_id, distance FROM {vector_table(dims)} "
        "WHERE embedding MATCH :vector AND k = :k AND agent_id = :agent_id"
    )
    params: dict[str, object] = {"vector": vector, "k": k, "agent_id": agent_id}
    found: list[tuple[str, float]] = []
    if channels is None:
        rows = connection.execute(text(sql + " ORDER BY distance"), params).all()
        found += [(str(row.record_id), float(row.distance)) for row in rows if row.distance is not None]
    else:
        statement = text(sql + " AND channel = :channel ORDER BY distance")
        for channel in dict.fromkeys(channels):
            hits = None if cache is None else ann.search(connection, cache, agent_id, channel, vector, k)
            if hits is None:  # a small partition: exact
                rows = connection.execute(statement, {**params, "channel": channel}).all()
                hits = [(str(row.record_id), float(row.distance)) for row in rows if row.distance is not None]
            found += hits
    return sorted(found, key=lambda hit: (hit[1], hit[0]))[:k]
