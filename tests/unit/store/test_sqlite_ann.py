"""The SQLite store's sub-linear search in large compartments (`store/sqlite/ann.py`,
migration 16): binary codes, exact re-rank, the mean's refresh, stale entries, the
compartment rules under tampering, and the upgrade of a version-15 file.

Real store files throughout; the internals are only read (and, in one test, a block is
corrupted on disk the way a bug would), never patched. Vectors are 32-d clusters with a
common offset, like embeddings; recall is checked against numpy's exact answer."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import insert

from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.schema import tables as schema
from persyn.store.schema.migrations import LATEST_VERSION, migrate
from persyn.store.sqlite import ann
from persyn.store.sqlite.engine import create_sqlite_engine
from persyn.store.sqlite.migrations import SQLITE_MIGRATIONS
from persyn.store.sqlite.store import SQLiteStore

T0 = datetime(2026, 12, 2, 6, tzinfo=UTC)
MAIN = "terminal:main"
OTHER = "discord:room"
DIMS = 32
MODEL = "test-embedder"


class Clusters:
    """Embedding-like vectors: a shared offset, 30 cluster centres, spread within each."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.common = self.rng.standard_normal(DIMS) * 1.5
        self.centres = self.rng.standard_normal((30, DIMS))

    def draw(self, count: int, shift: float = 0.0) -> np.ndarray[Any, Any]:
        picks = self.rng.integers(0, len(self.centres), count)
        rows = self.common + shift + self.centres[picks] + self.rng.standard_normal((count, DIMS)) * 0.8
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _records(agent_id: str, channel: str, count: int, start: int = 0) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            id=new_id(T0 + timedelta(milliseconds=start + i)),
            agent_id=agent_id,
            created_at=T0,
            channel=channel,
            summary=f"memory {start + i}",
            importance=5,
            sensitivity=Sensitivity.PUBLIC,
        )
        for i in range(count)
    ]


async def _fill(
    store: SQLiteStore, agent_id: str, channel: str, vectors: np.ndarray[Any, Any], start: int = 0
) -> list[str]:
    records = _records(agent_id, channel, len(vectors), start)
    assert all(await store.add_records(records, [v.tolist() for v in vectors], MODEL))
    return [r.id for r in records]


def _partition(path: Path, agent_id: str, channel: str) -> dict[str, Any]:
    engine = create_sqlite_engine(path, writer=False)
    try:
        with engine.connect() as connection:
            row = connection.exec_driver_sql(
                "SELECT vectors, built_at, stale, generation, "
                "(SELECT count(*) FROM memory_ann_blocks b WHERE b.agent_id = p.agent_id AND "
                "b.channel = p.channel AND b.dims = p.dims) FROM memory_ann_partitions p "
                "WHERE agent_id = ? AND channel = ? AND dims = ?",
                (agent_id, channel, DIMS),
            ).one()
    finally:
        engine.dispose()
    return dict(zip(("vectors", "built_at", "stale", "generation", "blocks"), row, strict=True))


def _exact(
    ids: Sequence[str], vectors: np.ndarray[Any, Any], query: np.ndarray[Any, Any], k: int
) -> list[str]:
    order = np.argsort(-(vectors @ query), kind="stable")[:k]
    return [ids[int(i)] for i in order]


async def _recall(
    store: SQLiteStore,
    agent_id: str,
    ids: Sequence[str],
    vectors: np.ndarray[Any, Any],
    queries: np.ndarray[Any, Any],
) -> float:
    found = 0
    for query in queries:
        hits = await store.vector_candidates(agent_id, query.tolist(), 10, [MAIN])
        assert len(hits) == 10
        found += len({hit[0] for hit in hits} & set(_exact(ids, vectors, query, 10)))
    return found / (10 * len(queries))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_large_compartment_is_coded_and_searched_with_exact_distances(
    store: SQLiteStore, tmp_path: Path
) -> None:
    agent_id = new_id()
    clusters = Clusters(1)
    vectors = clusters.draw(4_000)
    ids = await _fill(store, agent_id, MAIN, vectors)
    assert _partition(tmp_path / "persyn.db", agent_id, MAIN) == {
        "vectors": 4_000, "built_at": 4_000, "stale": 0, "generation": 1, "blocks": 1,
    }  # fmt: skip

    queries = clusters.draw(25)
    assert await _recall(store, agent_id, ids, vectors, queries) >= 0.9
    hits = await store.vector_candidates(agent_id, queries[0].tolist(), 50, [MAIN])
    by_id = dict(zip(ids, vectors, strict=True))
    # Distances are exact cosine distances, closest first.
    assert [d for _, d in hits] == sorted(d for _, d in hits)
    assert [d for _, d in hits] == pytest.approx(
        [1 - float(by_id[i] @ queries[0]) for i, _ in hits], abs=1e-5
    )


async def test_a_search_never_leaves_the_callers_compartment(store: SQLiteStore, tmp_path: Path) -> None:
    """Another channel of the agent and another agent's same channel hold vectors nearer to
    every query than anything in the compartment asked for; even with the compartment's
    code block corrupted to name their rows, none of them comes back."""
    agent_id, stranger = new_id(), new_id()
    clusters = Clusters(2)
    mine = await _fill(store, agent_id, MAIN, clusters.draw(4_000))
    queries = clusters.draw(10)
    near = np.repeat(queries, 400, axis=0)  # exact copies of the queries: distance 0
    others = await _fill(store, agent_id, OTHER, near, start=10_000)
    theirs = await _fill(store, stranger, MAIN, near, start=20_000)
    for query in queries:
        hits = await store.vector_candidates(agent_id, query.tolist(), 20, [MAIN])
        assert len(hits) == 20 and {hit[0] for hit in hits} <= set(mine)
        both = await store.vector_candidates(agent_id, query.tolist(), 20, [MAIN, OTHER])
        assert both[0][1] == pytest.approx(0.0, abs=1e-5) and both[0][0] in others

    # A bug or a damaged file makes the compartment's codes name other compartments' rows.
    engine = create_sqlite_engine(tmp_path / "persyn.db", writer=True)
    try:
        with engine.begin() as connection:
            foreign = connection.exec_driver_sql(
                "SELECT id FROM memory_ann_units WHERE NOT (agent_id = ? AND channel = ?) ORDER BY id",
                (agent_id, MAIN),
            ).scalars()
            blob = np.asarray(list(foreign)[::2], dtype=np.int64).tobytes()  # both of them
            changed = connection.exec_driver_sql(
                "UPDATE memory_ann_blocks SET ids = ?, version = version + 1 WHERE agent_id = ? AND channel = ?",
                (blob, agent_id, MAIN),
            ).rowcount
            assert changed == 1
    finally:
        engine.dispose()
    for query in queries:
        hits = await store.vector_candidates(agent_id, query.tolist(), 20, [MAIN])
        assert not {hit[0] for hit in hits} & (set(others) | set(theirs))


async def test_appended_vectors_are_found_and_the_mean_is_refreshed_when_the_compartment_doubles(
    store: SQLiteStore, tmp_path: Path
) -> None:
    path = tmp_path / "persyn.db"
    agent_id = new_id()
    clusters = Clusters(3)
    first = clusters.draw(2_000)
    ids = await _fill(store, agent_id, MAIN, first)
    assert _partition(path, agent_id, MAIN)["built_at"] == 2_000

    # The topic drifts: new vectors are coded against the old mean and appended.
    drifted = clusters.draw(1_500, shift=0.7)
    ids += await _fill(store, agent_id, MAIN, drifted, start=2_000)
    state = _partition(path, agent_id, MAIN)
    assert (state["vectors"], state["built_at"], state["generation"]) == (3_500, 2_000, 1)
    vectors = np.concatenate([first, drifted])
    assert await _recall(store, agent_id, ids, vectors, clusters.draw(20, shift=0.7)) >= 0.85

    one = clusters.draw(1, shift=0.7)
    ids += await _fill(store, agent_id, MAIN, one, start=3_500)  # found right after its write
    hits = await store.vector_candidates(agent_id, one[0].tolist(), 1, [MAIN])
    assert hits[0][0] == ids[-1]

    more = clusters.draw(600, shift=0.7)
    ids += await _fill(store, agent_id, MAIN, more, start=4_000)  # 4,101 >= 2 x 2,000: rebuilt
    state = _partition(path, agent_id, MAIN)
    assert (state["vectors"], state["built_at"], state["stale"], state["generation"]) == (4_101, 4_101, 0, 2)
    vectors = np.concatenate([vectors, one, more])
    assert await _recall(store, agent_id, ids, vectors, clusters.draw(20, shift=0.7)) >= 0.9


async def test_deleted_and_replaced_vectors_are_never_returned(store: SQLiteStore, tmp_path: Path) -> None:
    path = tmp_path / "persyn.db"
    agent_id = new_id()
    clusters = Clusters(4)
    vectors = clusters.draw(4_000)
    ids = await _fill(store, agent_id, MAIN, vectors)
    query = clusters.draw(1)[0]
    top = [hit[0] for hit in await store.vector_candidates(agent_id, query.tolist(), 10, [MAIN])]
    assert await store.delete_records(agent_id, top[:5]) == 5
    # Another record takes the query's place: its old vector must not answer for it.
    moved = top[5]
    await store.set_record_vector(agent_id, moved, (-query).tolist(), MODEL)
    state = _partition(path, agent_id, MAIN)
    assert (state["vectors"], state["stale"]) == (3_995, 6)
    hits = await store.vector_candidates(agent_id, query.tolist(), 10, [MAIN])
    assert not {hit[0] for hit in hits} & set(top[:6])
    far = await store.vector_candidates(agent_id, (-query).tolist(), 1, [MAIN])
    assert far == [(moved, pytest.approx(0.0, abs=1e-5))]

    # Over a quarter of the codes stale: the compartment is rebuilt without them.
    alive = [i for i in ids if i not in set(top[:5])]
    assert await store.delete_records(agent_id, alive[:1_000]) == 1_000
    state = _partition(path, agent_id, MAIN)
    assert (state["vectors"], state["built_at"], state["stale"]) == (2_995, 2_995, 0)
    # A cull below half the threshold returns the compartment to exact search.
    assert await store.delete_records(agent_id, alive[1_000:3_000]) == 2_000
    state = _partition(path, agent_id, MAIN)
    assert (state["vectors"], state["built_at"], state["blocks"]) == (995, None, 0)
    remaining = {i: v for i, v in zip(ids, vectors, strict=True) if i in set(alive[3_000:])}
    remaining_ids = [i for i in remaining if i != moved]
    hits = await store.vector_candidates(agent_id, query.tolist(), 10, [MAIN])
    truth = _exact(remaining_ids, np.asarray([remaining[i] for i in remaining_ids]), query, 10)
    assert [hit[0] for hit in hits] == truth


async def test_another_store_on_the_same_file_sees_new_vectors_at_once(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """Each store caches the codes; a write through another process's store changes a
    block's version, which the next search reads, so the cache is never stale."""
    agent_id = new_id()
    clusters = Clusters(5)
    await _fill(store, agent_id, MAIN, clusters.draw(4_000))
    query = clusters.draw(1)[0]
    await store.vector_candidates(agent_id, query.tolist(), 10, [MAIN])  # cached now
    other = SQLiteStore(tmp_path / "persyn.db")
    await other.setup()
    try:
        [added] = await _fill(other, agent_id, MAIN, query[None, :], start=9_000)
    finally:
        await other.close()
    hits = await store.vector_candidates(agent_id, query.tolist(), 10, [MAIN])
    assert hits[0] == (added, pytest.approx(0.0, abs=1e-5))


async def test_migration_16_codes_the_vectors_of_a_version_15_database(tmp_path: Path) -> None:
    path = tmp_path / "persyn.db"
    agent_id = new_id()
    clusters = Clusters(6)
    big, small = clusters.draw(4_000), clusters.draw(5)
    engine = create_sqlite_engine(path, writer=True)
    rows = [(r, v) for r, v in zip(_records(agent_id, MAIN, 4_000), big, strict=True)]
    rows += [(r, v) for r, v in zip(_records(agent_id, OTHER, 5, start=5_000), small, strict=True)]
    try:
        with engine.connect() as connection:
            assert migrate(connection, SQLITE_MIGRATIONS, target=15) == 15
        with engine.begin() as connection:  # what the store wrote before migration 16
            connection.exec_driver_sql(
                f"CREATE VIRTUAL TABLE memory_vectors_{DIMS} USING vec0(record_id text primary key, "
                f"agent_id text partition key, channel text partition key, embedding float[{DIMS}] "
                "distance_metric=cosine, +embedding_model text, chunk_size=256)"
            )
            connection.execute(
                insert(schema.memory_records),
                [
                    {
                        "id": r.id, "agent_id": r.agent_id, "created_at": r.created_at, "channel": r.channel,
                        "participant_ids": [], "summary": r.summary, "importance": 5, "tags": [],
                        "sensitivity": "public", "message_ids": [], "kind": "exchange",
                        "embedding_model": MODEL, "dims": DIMS,
                    }
                    for r, _ in rows
                ],
            )  # fmt: skip
            connection.exec_driver_sql(
                f"INSERT INTO memory_vectors_{DIMS}(record_id, agent_id, channel, embedding, embedding_model) "
                "VALUES (?, ?, ?, ?, ?)",
                [(r.id, r.agent_id, r.channel, struct.pack(f"<{DIMS}f", *v), MODEL) for r, v in rows],
            )
        with engine.connect() as connection:
            assert migrate(connection, SQLITE_MIGRATIONS) == LATEST_VERSION
    finally:
        engine.dispose()
    assert _partition(path, agent_id, MAIN) == {
        "vectors": 4_000, "built_at": 4_000, "stale": 0, "generation": 1, "blocks": 1,
    }  # fmt: skip
    assert _partition(path, agent_id, OTHER)["built_at"] is None

    store = SQLiteStore(path)
    await store.setup()
    try:
        ids = [r.id for r, _ in rows[:4_000]]
        assert await _recall(store, agent_id, ids, big, clusters.draw(20)) >= 0.9
        hits = await store.vector_candidates(agent_id, small[0].tolist(), 1, [OTHER])
        assert hits[0][0] == rows[4_000][0].id
        # The upgraded file keeps coding what arrives.
        [added] = await _fill(store, agent_id, MAIN, small[:1], start=9_000)
        assert (await store.vector_candidates(agent_id, small[0].tolist(), 1, [MAIN]))[0][0] == added
    finally:
        await store.close()


def test_the_prefilter_keeps_a_threshold_set_of_at_least_the_candidates_with_full_distances() -> None:
    """Large partitions scan the codes' first words for every entry and the rest only for
    the entries nearest on them: what comes out must be every entry under one threshold on
    the first words (never a gap), at least the candidates wanted, with full distances."""
    rng = np.random.default_rng(3)
    words = 8  # 512-bit codes, as for 256-d vectors

    def segment(count: int) -> ann._Segment:  # pyright: ignore[reportPrivateUsage]
        codes = rng.integers(0, 2**63, (words, count), dtype=np.uint64)
        return ann._Segment(
            {0: 0}, np.arange(count), codes, np.zeros((count, 1), np.int8), np.ones(count, np.float32)
        )  # pyright: ignore[reportPrivateUsage]

    partition = ann._Partition(1, 43_000, np.zeros(1, np.float32), np.zeros((1, 1), np.float32))  # pyright: ignore[reportPrivateUsage]
    partition.segments = [segment(40_000), segment(3_000)]
    code = rng.integers(0, 2**63, words, dtype=np.uint64)
    wanted = 300
    kept = ann._prefilter(partition, code, wanted)  # pyright: ignore[reportPrivateUsage]

    assert sum(len(rows) for rows, _ in kept) >= wanted
    assert sum(len(rows) for rows, _ in kept) < 43_000 // 2  # it did filter
    inside: list[int] = []
    outside: list[int] = []
    for seg, (rows, distances) in zip(partition.segments, kept, strict=True):
        head = ann._hamming(seg.words[:2], code[:2])  # pyright: ignore[reportPrivateUsage]
        assert distances.tolist() == ann._hamming(seg.words, code)[rows].tolist()  # pyright: ignore[reportPrivateUsage]
        mask = np.zeros(seg.words.shape[1], bool)
        mask[rows] = True
        inside += head[mask].tolist()
        outside += head[~mask].tolist()
    assert max(inside) < min(outside)


async def test_warming_loads_each_indexed_partition_of_the_agent_and_searches_stay_exact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "persyn.db"
    writer = SQLiteStore(path)
    await writer.setup()
    agent_id, other = new_id(), new_id()
    clusters = Clusters(5)
    try:
        vectors = clusters.draw(3_000)
        ids = await _fill(writer, agent_id, MAIN, vectors)
        await _fill(writer, agent_id, OTHER, clusters.draw(500), start=10_000)  # exact: no codes
        await _fill(writer, other, MAIN, clusters.draw(2_500), start=20_000)
    finally:
        await writer.close()
    # A store opened afresh, as a process starts: the agent's one indexed partition loads;
    # an agent with nothing indexed, or unknown, loads none.
    store = SQLiteStore(path)
    await store.setup()
    try:
        assert await store.warm_recall(agent_id) == 1
        assert await store.warm_recall(new_id()) == 0
        queries = clusters.draw(10)
        assert await _recall(store, agent_id, ids, vectors, queries) >= 0.9
        # Warming twice is harmless, and another agent's partition is its own.
        assert await store.warm_recall(agent_id) == 1
        assert await store.warm_recall(other) == 1
        hits = await store.vector_candidates(other, queries[0].tolist(), 20, [MAIN])
        assert hits and not set(ids) & {hit[0] for hit in hits}
    finally:
        await store.close()
