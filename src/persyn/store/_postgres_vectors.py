"""Record vectors in pgvector (ARCHITECTURE §7.2): one table per dimension, one HNSW index each.

    CREATE TABLE memory_vectors_<dims> (
        record_id  CHAR(26) PRIMARY KEY REFERENCES memory_records (id) ON DELETE CASCADE,
        agent_id, channel, embedding_model,
        embedding  vector(<dims>) NOT NULL)
    + a btree on (agent_id, channel) and an HNSW index on embedding (cosine)

Created when the first vector of that size is stored, under the store's write lock, so
two processes never race to create it. Vectors are unit length (`unit_vector`), so cosine
distance `<=>` orders exactly as on SQLite and the scores agree.

The compartment strategy. A query filters by agent and by the set of channels the access
rules allow (`memory/access.py`), and the planner picks one of two paths:
- a compartment that is a small share of the table is read through the (agent_id,
  channel) btree and sorted exactly: no index can beat reading a few thousand rows;
- a compartment that is a large share (the one-busy-channel case of issue 20) walks the
  HNSW graph in distance order and filters as it goes, sub-linear in the table.
pgvector 0.6 stops an HNSW walk after `hnsw.ef_search` candidates (here k, at least 200
and at most 1000), so a filter that rejects most candidates can leave fewer than k; then — and
whenever fewer than k came back — the query is repeated as an exact scan of the
compartment, which is cheap exactly when the compartment is small. A search therefore never
returns fewer hits than the compartment can give, but the HNSW path is approximate: it can
miss a true neighbour (recall@10 against exact search is measured by `bench/pg_vectors.py`;
index built with pgvector's defaults, m=16, ef_construction=64). Vectors over 2000
dimensions (HNSW's limit) are always searched exactly.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from persyn.core.errors import InputError

__all__ = ["MAX_K", "NewVector", "delete_vectors", "nearest", "put_vectors", "vector_literal", "vector_table"]

MAX_DIMS = 8192  # the SQLite backend's limit: a vector either backend accepts, both do
MAX_HNSW_DIMS = 2000  # pgvector's limit for an HNSW index on `vector`
MAX_K = 4096  # as on SQLite, so both backends cut the same candidate list
# The HNSW walk's candidate list: at least k, and never under _MIN_EF_SEARCH, where recall
# on hard (unclustered) data stays high; pgvector's default of 40 gave recall@10 0.63 on
# 20k random 64-dimensional vectors (bench/pg_vectors.py).
_MIN_EF_SEARCH = 200
_MAX_EF_SEARCH = 1000
TABLE_PREFIX = "memory_vectors_"


def vector_table(dims: int) -> str:
    """The table of `dims`-dimensional vectors; `dims` is checked, so the name is safe to
    splice into SQL."""
    if not isinstance(dims, int) or not 1 <= dims <= MAX_DIMS:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InputError(f"vector dimensions {dims!r} out of range 1..{MAX_DIMS}")
    return f"{TABLE_PREFIX}{dims}"


def vector_literal(unit: bytes) -> str:
    """A float32 vector (as `unit_vector` packs it) in pgvector's text form `[x,y,...]`;
    repr of a float round-trips, so nothing is lost."""
    values = struct.unpack(f"<{len(unit) // 4}f", unit)
    return "[" + ",".join(repr(value) for value in values) + "]"


@dataclass(frozen=True)
class NewVector:
    """A record's unit vector (float32 bytes) on its way into the index."""

    record_id: str
    agent_id: str
    channel: str
    embedding_model: str
    vector: bytes


def _has_table(connection: Connection, dims: int) -> bool:
    """Whether the `dims` table exists. Tables are never dropped, so one seen committed is
    remembered on the driver connection (`info` lives as long as it), saving a round trip
    on every later write; one created in the current transaction is not (it may roll back)."""
    known: set[int] = connection.info.setdefault("persyn_vector_tables", set())
    if dims in known:
        return True
    found = connection.execute(text("SELECT to_regclass(:name)"), {"name": vector_table(dims)}).scalar()
    return found is not None


def _remember_table(connection: Connection, dims: int) -> None:
    connection.info.setdefault("persyn_vector_tables", set()).add(dims)


def _ensure_table(connection: Connection, dims: int) -> str:
    name = vector_table(dims)
    if _has_table(connection, dims):
        _remember_table(connection, dims)
        return name
    connection.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {name} ("
        "record_id CHAR(26) PRIMARY KEY REFERENCES memory_records (id) ON DELETE CASCADE, "
        "agent_id VARCHAR(200) NOT NULL, channel VARCHAR(700) NOT NULL, "
        f"embedding_model VARCHAR(300) NOT NULL, embedding vector({dims}) NOT NULL)"
    )
    connection.exec_driver_sql(
        f"CREATE INDEX IF NOT EXISTS ix_{name}_compartment ON {name} (agent_id, channel)"
    )
    if dims <= MAX_HNSW_DIMS:
        connection.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS ix_{name}_hnsw ON {name} USING hnsw (embedding vector_cosine_ops)"
        )
    return name


def put_vectors(connection: Connection, new: Sequence[NewVector]) -> None:
    """Store records' unit vectors, creating tables as needed: one executemany per size."""
    by_dims: dict[int, list[dict[str, object]]] = {}
    for item in new:
        by_dims.setdefault(len(item.vector) // 4, []).append(
            {
                "record_id": item.record_id,
                "agent_id": item.agent_id,
                "channel": item.channel,
                "model": item.embedding_model,
                "embedding": vector_literal(item.vector),
            }
        )
    for dims, params in by_dims.items():
        name = _ensure_table(connection, dims)
        connection.execute(
            text(
                f"INSERT INTO {name} (record_id, agent_id, channel, embedding_model, embedding) "
                f"VALUES (:record_id, :agent_id, :channel, :model, CAST(:embedding AS vector({dims})))"
            ),
            params,
        )


def delete_vectors(connection: Connection, dims: int, record_ids: Iterable[str]) -> None:
    """Delete these records' vectors from the `dims` table (if it exists)."""
    wanted = list(record_ids)
    if wanted and _has_table(connection, dims):
        statement = text(f"DELETE FROM {vector_table(dims)} WHERE record_id = ANY(:ids)")
        connection.execute(statement, {"ids": wanted})


def nearest(
    connection: Connection, agent_id: str, vector: bytes, k: int, channels: Sequence[str] | None
) -> list[tuple[str, float]]:
    """The `k` records of `agent_id` (in `channels`, if given) nearest to the unit `vector`,
    as (record_id, cosine distance), closest first; ties in id order. See the module note
    for the two paths."""
    dims = len(vector) // 4
    k = min(k, MAX_K)
    if k <= 0 or (channels is not None and not channels) or not _has_table(connection, dims):
        return []
    name = vector_table(dims)
    where = "agent_id = :agent_id" + ("" if channels is None else " AND channel = ANY(:channels)")
    params: dict[str, object] = {"agent_id": agent_id, "vector": vector_literal(vector), "k": k}
    if channels is not None:
        params["channels"] = list(dict.fromkeys(channels))
    distance = f"embedding <=> CAST(:vector AS vector({dims}))"
    rows: list[tuple[str, float]] = []
    if dims <= MAX_HNSW_DIMS:
        connection.exec_driver_sql(
            f"SET LOCAL hnsw.ef_search = {max(_MIN_EF_SEARCH, min(k, _MAX_EF_SEARCH))}"
        )
        indexed = (
            f"SELECT record_id, {distance} AS distance FROM {name} WHERE {where} ORDER BY {distance} LIMIT :k"
        )
        rows = [(str(r.record_id), float(r.distance)) for r in connection.execute(text(indexed), params)]
    if len(rows) < k:
        # `+ 0` hides the ordering from the HNSW index: an exact scan of the compartment.
        exact = f"SELECT record_id, {distance} AS distance FROM {name} WHERE {where} ORDER BY ({distance}) + 0 LIMIT :k"
        rows = [(str(r.record_id), float(r.distance)) for r in connection.execute(text(exact), params)]
    return sorted(rows, key=lambda hit: (hit[1], hit[0]))[:k]
