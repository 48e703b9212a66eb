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
pgvector 0.6 stops an HNSW walk after `hnsw.ef_search` candidates (here k, at least 300 —
200 in compartments of at most 250,000 records — and at most 1000), so a filter that rejects most candidates can leave fewer than k; then — and
whenever fewer than k came back — the query is repeated as an exact scan of the
compartment, which is cheap exactly when the compartment is small. A search therefore never
returns fewer hits than the compartment can give, but the HNSW path is approximate: it can
miss a true neighbour (recall@10 against exact search is measured by `bench/pg_vectors.py`;
index built with pgvector's defaults, m=16, ef_construction=64). Vectors over 2000
dimensions (HNSW's limit) are always searched exactly.

Bulk loads (`BulkVectorLoad`). Inserting into an HNSW graph costs a graph search per row
(101 records/s at 100k on a 2-core VM), while `CREATE INDEX` builds it in memory many times
faster. A load that is large against its table therefore drops the HNSW index with its
first batch, copies the vectors in (`COPY`, as every vector write does), and builds the
index once at the end, with a `maintenance_work_mem` sized for the graph. Meanwhile readers
take the exact path (no index: the planner scans the compartment), slower but exact. A
load holds a session advisory lock on its table while the index is away; a store that
opens (`restore_indexes`, from `PostgresStore.setup`) and finds a table without its HNSW
index and no such lock held rebuilds the index: a load killed half way (kill -9) leaves
its committed batches, a working store, and an index back at the next start.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.pool import NullPool

from persyn.core.errors import InputError
from persyn.store.postgres.engine import driver_url

__all__ = [
    "BULK_MIN_RECORDS",
    "MAX_K",
    "BulkVectorLoad",
    "NewVector",
    "delete_vectors",
    "missing_indexes",
    "nearest",
    "nearest_rows",
    "put_vectors",
    "restore_indexes",
    "vector_literal",
    "vector_table",
]

_log = logging.getLogger(__name__)

MAX_DIMS = 8192  # the SQLite backend's limit: a vector either backend accepts, both do
MAX_HNSW_DIMS = 2000  # pgvector's limit for an HNSW index on `vector`
MAX_K = 4096  # as on SQLite, so both backends cut the same candidate list
# The HNSW walk's candidate list: at least k, and never under _MIN_EF_SEARCH, where recall
# on hard (unclustered) data stays high; pgvector's default of 40 gave recall@10 0.63 on
# 20k random 64-dimensional vectors (bench/pg_vectors.py). At 1M clustered 256-d vectors in
# one compartment (bench/memory_scale.py --vector-stage, m 16, ef_construction 64) 200 gave
# recall@10 0.980 (p50 14.8 ms), 300 0.988 (19.4 ms), 400 0.989 (25.0 ms): 300 for a margin.
# A smaller graph needs less: at 100k 200 gave 0.994, so compartments of at most
# _SMALL_COMPARTMENT records (their count read from `memory_text_stats`, migration 22) walk 200.
_MIN_EF_SEARCH = 300
_SMALL_EF_SEARCH = 200
_SMALL_COMPARTMENT = 250_000
_MAX_EF_SEARCH = 1000
TABLE_PREFIX = "memory_vectors_"
# The graph's shape (pgvector's defaults); the same for an index built row by row or in bulk.
HNSW_OPTIONS = "m = 16, ef_construction = 64"
# A bulk load drops the HNSW index when it brings at least this many vectors AND at least
# a quarter of those already in the table: rebuilding then costs less than inserting into
# the graph row by row (see `BulkVectorLoad`), and readers are on the exact path only for
# as long as the load takes.
BULK_MIN_RECORDS = 5_000
_BULK_MIN_SHARE = 0.25
# maintenance_work_mem for a build: the graph's size (vector + ~2 x m neighbour slots of
# 8 bytes + ~100 bytes of element per row, measured against pgvector's "graph no longer fits"
# notice), within these bounds. The upper bound is what one build may take of the server's
# memory; a graph larger than that still builds, more slowly, on disk.
_BUILD_MEMORY_MIN_MB = 64
_BUILD_MEMORY_MAX_MB = 2_048
# Advisory locks of the two-int form are a key space apart from the writers' one-bigint lock;
# this class names "a bulk load holds this vector table's index away".
_BULK_LOCK_CLASS = 0x7062_6C6B  # "pblk"


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


def _index_name(dims: int) -> str:
    return f"ix_{vector_table(dims)}_hnsw"


def _create_index_sql(dims: int) -> str:
    return (
        f"CREATE INDEX IF NOT EXISTS {_index_name(dims)} ON {vector_table(dims)} "
        f"USING hnsw (embedding vector_cosine_ops) WITH ({HNSW_OPTIONS})"
    )


def _ensure_table(connection: Connection, dims: int, *, with_index: bool = True) -> str:
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
    if dims <= MAX_HNSW_DIMS and with_index:
        connection.exec_driver_sql(_create_index_sql(dims))
    return name


def put_vectors(connection: Connection, new: Sequence[NewVector], bulk: BulkVectorLoad | None = None) -> None:
    """Store records' unit vectors, creating tables as needed: one COPY per size. Within a
    `bulk` load, its rule may first take the table's HNSW index away (in this transaction)."""
    by_dims: dict[int, list[NewVector]] = {}
    for item in new:
        by_dims.setdefault(len(item.vector) // 4, []).append(item)
    for dims, items in by_dims.items():
        away = bulk is not None and bulk.hold_index(connection, dims)
        name = _ensure_table(connection, dims, with_index=not away)
        driver = connection.connection.driver_connection
        assert driver is not None
        columns = "record_id, agent_id, channel, embedding_model, embedding"
        with driver.cursor() as cursor, cursor.copy(f"COPY {name} ({columns}) FROM STDIN") as copy:
            for item in items:
                copy.write_row(
                    (
                        item.record_id,
                        item.agent_id,
                        item.channel,
                        item.embedding_model,
                        vector_literal(item.vector),
                    )
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
    return [(row[0], row[1]) for row in nearest_rows(connection, agent_id, vector, k, channels, ())]


def nearest_rows(
    connection: Connection,
    agent_id: str,
    vector: bytes,
    k: int,
    channels: Sequence[str] | None,
    record_columns: Sequence[str],
) -> list[tuple[Any, ...]]:
    """`nearest`'s hits as rows (record_id, distance, *record_columns): the hits joined, in
    the same statement, to these columns of their `memory_records` rows (NULLs where a row
    is missing). Recall reads its candidates this way: one round trip instead of a search
    and then a fetch (`PostgresMemory.vector_recall`). The join runs after the LIMIT, on
    the k hits only, so the index walk is the one `nearest` makes."""
    dims = len(vector) // 4
    k = min(k, MAX_K)
    if k <= 0 or (channels is not None and not channels) or not _has_table(connection, dims):
        return []
    # Found from a read-only transaction, the table was committed: remember it.
    _remember_table(connection, dims)
    name = vector_table(dims)
    where = "agent_id = %(agent_id)s" + ("" if channels is None else " AND channel = ANY(%(channels)s)")
    params: dict[str, object] = {"agent_id": agent_id, "vector": vector_literal(vector), "k": k}
    if channels is not None:
        params["channels"] = list(dict.fromkeys(channels))
    distance = f"embedding <=> CAST(%(vector)s AS vector({dims}))"
    joined = "".join(f", m.{column}" for column in record_columns)

    def search(order_by: str) -> list[tuple[Any, ...]]:
        hits = f"SELECT record_id, {distance} AS distance FROM {name} WHERE {where} ORDER BY {order_by} LIMIT %(k)s"
        if record_columns:
            hits = (
                f"WITH hits AS MATERIALIZED ({hits}) SELECT hits.record_id, hits.distance{joined} FROM hits "
                "LEFT JOIN memory_records m ON m.id = hits.record_id AND m.agent_id = %(agent_id)s"
            )
        rows = connection.exec_driver_sql(hits, params)
        return [(str(row[0]), float(row[1]), *row[2:]) for row in rows]

    rows: list[tuple[Any, ...]] = []
    if dims <= MAX_HNSW_DIMS:
        # One round trip, as SET LOCAL was: the compartment's size picks the floor.
        size = "SELECT sum(records) FROM memory_text_stats WHERE " + where
        connection.exec_driver_sql(
            f"SELECT set_config('hnsw.ef_search', (CASE WHEN coalesce(({size}), 0) > {_SMALL_COMPARTMENT} "
            f"THEN {max(_MIN_EF_SEARCH, min(k, _MAX_EF_SEARCH))} "
            f"ELSE {max(_SMALL_EF_SEARCH, min(k, _MAX_EF_SEARCH))} END)::text, true)",
            params,
        )
        rows = search(distance)
    if len(rows) < k:
        # `+ 0` hides the ordering from the HNSW index: an exact scan of the compartment.
        rows = search(f"({distance}) + 0")
    return sorted(rows, key=lambda hit: (hit[1], hit[0]))[:k]


# --- bulk loads ------------------------------------------------------------------------------


def _bulk_lock_key(connection: Connection, dims: int) -> int:
    """The advisory-lock key of this schema's `dims` table: several stores (schemas) may share
    one database, each with its own tables."""
    schema = str(connection.exec_driver_sql("SELECT current_schema()").scalar_one())
    return zlib.crc32(f"{schema}.{vector_table(dims)}".encode()) - 2**31  # an int4


def _table_rows(connection: Connection, dims: int) -> int:
    if not _has_table(connection, dims):
        return 0
    return int(connection.exec_driver_sql(f"SELECT count(*) FROM {vector_table(dims)}").scalar_one())


def missing_indexes(connection: Connection) -> list[int]:
    """The dimensions of this schema's vector tables that should have an HNSW index and
    have none (or an invalid one): a bulk load under way, or one that was interrupted."""
    rows = connection.execute(
        text(
            "SELECT c.relname, (SELECT bool_and(i.indisvalid) FROM pg_index i "
            "JOIN pg_class x ON x.oid = i.indexrelid WHERE i.indrelid = c.oid AND x.relname = "
            "'ix_' || c.relname || '_hnsw') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE :prefix"
        ),
        {"prefix": f"{TABLE_PREFIX}%"},
    ).all()
    missing: list[int] = []
    for name, valid in rows:
        suffix = str(name).removeprefix(TABLE_PREFIX)
        if suffix.isdigit() and int(suffix) <= MAX_HNSW_DIMS and not valid:
            missing.append(int(suffix))
    return sorted(missing)


def _build_memory_mb(rows: int, dims: int) -> int:
    estimate = rows * (dims * 4 + 2 * 16 * 8 + 100) // 2**20
    return max(_BUILD_MEMORY_MIN_MB, min(_BUILD_MEMORY_MAX_MB, int(estimate * 1.2)))


def _build_index(connection: Connection, dims: int) -> None:
    """Build `dims`'s HNSW index on `connection` (autocommit, not holding the writers' lock:
    other writes go on; writes of vectors of this size wait for the build). An invalid
    index (a failed concurrent build) is replaced."""
    rows = _table_rows(connection, dims)
    connection.exec_driver_sql(f"SET maintenance_work_mem = '{_build_memory_mb(rows, dims)}MB'")
    # Parallel workers: the server's max_parallel_maintenance_workers as its operator set it
    # (default 2; pgvector 0.6 builds HNSW in parallel). The server's CPU count is not
    # visible from SQL, and 4 workers on a 2-core VM only contended.
    if dims in missing_indexes(connection):  # absent, or left invalid: start afresh
        connection.exec_driver_sql(f"DROP INDEX IF EXISTS {_index_name(dims)}")
    connection.exec_driver_sql(_create_index_sql(dims))
    connection.exec_driver_sql("RESET maintenance_work_mem")


class BulkVectorLoad:
    """One large load of vectors (ARCHITECTURE §7.2): `hold_index` inside each write
    transaction that stores vectors, `finish` once at the end (also after an error).

    The rule, per vector table, decided at its first batch: `expected` (the records the load
    brings) at least `BULK_MIN_RECORDS` and at least a quarter of the table's rows. Then this
    load takes the table's bulk lock (a session advisory lock on a connection of its own,
    released when the load ends or its process dies), and the HNSW index is dropped in the
    batch's transaction (so it is gone exactly when the first batch is stored). Another
    process already loading that table in bulk keeps it: this load then writes row by row."""

    def __init__(self, url: URL, expected: int) -> None:
        self._url = url
        self.expected = expected
        self._engine: Engine | None = None
        self._lease: Connection | None = None
        self._decided: dict[int, bool] = {}

    def hold_index(self, connection: Connection, dims: int) -> bool:
        """Whether `dims`'s HNSW index is (now) away for this load."""
        if dims in self._decided:
            return self._decided[dims]
        away = False
        if dims <= MAX_HNSW_DIMS and self.expected >= BULK_MIN_RECORDS:
            existing = _table_rows(connection, dims)
            if self.expected >= _BULK_MIN_SHARE * existing:
                key = _bulk_lock_key(connection, dims)
                lease = self._lease_connection()
                away = bool(
                    lease.exec_driver_sql(
                        f"SELECT pg_try_advisory_lock({_BULK_LOCK_CLASS}, {key})"
                    ).scalar_one()
                )
                if away and _has_table(connection, dims):
                    connection.exec_driver_sql(f"DROP INDEX IF EXISTS {_index_name(dims)}")
                if away:
                    _log.info(
                        "bulk load of %d records: %s's HNSW index is rebuilt at the end",
                        self.expected,
                        vector_table(dims),
                    )
        self._decided[dims] = away
        return away

    def _lease_connection(self) -> Connection:
        if self._lease is None:
            self._engine = create_engine(driver_url(self._url), poolclass=NullPool)
            self._lease = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._lease

    @property
    def held(self) -> list[int]:
        return sorted(dims for dims, away in self._decided.items() if away)

    def finish(self) -> None:
        """Build every index this load took away, then release its locks. Called after an
        error too: the batches committed so far get their index."""
        try:
            if self._lease is not None:
                for dims in self.held:
                    _log.info("building %s's HNSW index", vector_table(dims))
                    _build_index(self._lease, dims)
        finally:
            self._decided.clear()
            if self._lease is not None:
                self._lease.close()  # ends the session: its advisory locks go with it
                self._lease = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


def restore_indexes(url: URL) -> list[int]:
    """Rebuild the HNSW index of every vector table of this schema that lacks it and that no
    bulk load holds (one was interrupted: killed, or its build failed). The dimensions
    rebuilt. Runs at every store start: one catalog query when nothing is missing."""
    engine = create_engine(driver_url(url), poolclass=NullPool)
    try:
        return _restore(engine)
    finally:
        engine.dispose()


def _restore(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        rebuilt: list[int] = []
        for dims in missing_indexes(connection):
            key = _bulk_lock_key(connection, dims)
            taken = connection.exec_driver_sql(f"SELECT pg_try_advisory_lock({_BULK_LOCK_CLASS}, {key})")
            if not taken.scalar_one():
                continue  # a bulk load under way: it builds the index when it ends
            try:
                if dims not in missing_indexes(connection):
                    continue
                _log.warning(
                    "%s has no HNSW index (a bulk load was interrupted): building it now",
                    vector_table(dims),
                )
                _build_index(connection, dims)
                rebuilt.append(dims)
            finally:
                connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_BULK_LOCK_CLASS}, {key})")
        return rebuilt
