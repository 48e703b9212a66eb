"""Bulk loads into PostgreSQL memory (ARCHITECTURE §7.2, issue 20): a large load takes the
HNSW index away and builds it once at the end. The load must store exactly what row-by-row
writes store and answer recall the same; readers during the load get exact answers; a load
stopped by bad input or killed with SIGKILL leaves its committed batches, a working store and
(at the next start) the index. A real PostgreSQL (pgserver)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from persyn.core.errors import InputError
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.ops.doctor.postgres import postgres_checks
from persyn.store import open_store
from persyn.store.capabilities import FullStore
from persyn.store.copying import copy_store
from persyn.store.postgres.vectors import BULK_MIN_RECORDS
from persyn.testing.postgres import PostgresForTests

pytestmark = pytest.mark.services

START = datetime(2026, 1, 1, tzinfo=UTC)
AGENT = derived_id(START, "bulk-agent")
BUSY = "discord:busy"
QUIET = "discord:quiet"
DIMS = 8
RECORDS = BULK_MIN_RECORDS + 1_000  # large enough for the bulk rule on an empty table
BATCH = 500
WORDS = ["garden", "boat", "violin", "kettle", "harbour", "lantern", "orchard", "tide"]


def _records(count: int) -> list[MemoryRecord]:
    """Every 40th record in the quiet channel (a small compartment: the exact path)."""
    return [
        MemoryRecord(
            id=derived_id(START + timedelta(minutes=i), AGENT, str(i)),
            agent_id=AGENT,
            created_at=START + timedelta(minutes=i),
            channel=QUIET if i % 40 == 0 else BUSY,
            summary=f"memory {i} about the {WORDS[i % 8]} and the {WORDS[(i * 3) % 8]}",
            tags=(WORDS[i % 5],),
            importance=1 + i % 10,
            sensitivity=Sensitivity.PUBLIC,
        )
        for i in range(count)
    ]


def _vectors(count: int, seed: int = 7) -> np.ndarray[Any, Any]:
    rows = np.random.default_rng(seed).standard_normal((count, DIMS)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


RECORDS_ALL = _records(RECORDS)
VECTORS_ALL = _vectors(RECORDS)
QUERIES = _vectors(12, seed=8)


@pytest.fixture
async def url(postgres_server: PostgresForTests) -> str:
    return postgres_server.fresh_schema("bulk")


@pytest.fixture
async def store(url: str) -> AsyncIterator[FullStore]:
    opened = open_store(url)
    await opened.setup()
    await opened.ensure_agent(AGENT, "Ada", START)
    try:
        yield opened
    finally:
        await opened.close()


async def _write(store: FullStore, first: int, last: int) -> None:
    for offset in range(first, last, BATCH):
        end = min(last, offset + BATCH)
        await store.add_records(
            RECORDS_ALL[offset:end], [v.tolist() for v in VECTORS_ALL[offset:end]], "test-embed"
        )


def _sql(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql))]
    finally:
        engine.dispose()


def _has_hnsw(url: str) -> bool:
    rows = _sql(
        url,
        f"SELECT i.indisvalid FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid "
        f"WHERE x.relname = 'ix_memory_vectors_{DIMS}_hnsw' "
        "AND x.relnamespace = current_schema()::regnamespace",
    )
    return rows == [(True,)]


def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "records": _sql(
            url,
            "SELECT id, agent_id, channel, summary, tags::text, importance, embedding_model, dims, "
            "created_at, search_tsv::text FROM memory_records ORDER BY id",
        ),
        "vectors": _sql(
            url,
            f"SELECT record_id, agent_id, channel, embedding_model, CAST(embedding AS real[]) "
            f"FROM memory_vectors_{DIMS} ORDER BY record_id",
        ),
    }


def _exact(count: int, query: np.ndarray[Any, Any], channel: str, k: int) -> list[str]:
    """The true k nearest among the first `count` records of `channel`, by brute force."""
    members = [i for i in range(count) if RECORDS_ALL[i].channel == channel]
    scores = VECTORS_ALL[members] @ query
    order = sorted(range(len(members)), key=lambda j: -float(scores[j]))[:k]
    return [RECORDS_ALL[members[j]].id for j in order]


async def _nearest(store: FullStore, query: np.ndarray[Any, Any], channel: str, k: int) -> list[str]:
    hits = await store.vector_candidates(AGENT, query.tolist(), k, [channel])
    return [record_id for record_id, _ in hits]


async def _answers(store: FullStore) -> list[Sequence[Any]]:
    found: list[Sequence[Any]] = []
    for query in QUERIES:
        for channel in (BUSY, QUIET):
            found.append(await _nearest(store, query, channel, 10))
    for word in WORDS:
        found.append(await store.keyword_candidates(AGENT, f"the {word}", 50, [BUSY]))
    return found


async def test_a_bulk_load_stores_and_recalls_what_row_by_row_writes_do(
    postgres_server: PostgresForTests, url: str, store: FullStore
) -> None:
    async with store.bulk_load(RECORDS):
        await _write(store, 0, RECORDS)
    assert _has_hnsw(url)

    row_by_row_url = postgres_server.fresh_schema("rows")
    other = open_store(row_by_row_url)
    await other.setup()
    try:
        await other.ensure_agent(AGENT, "Ada", START)
        await _write(other, 0, RECORDS)
        assert _has_hnsw(row_by_row_url)
        assert _dump(url) == _dump(row_by_row_url)
        bulk_answers, row_answers = await _answers(store), await _answers(other)
    finally:
        await other.close()
    assert bulk_answers == row_answers
    for index, query in enumerate(QUERIES):  # and both are the true nearest neighbours
        assert bulk_answers[2 * index] == _exact(RECORDS, query, BUSY, 10)
        assert bulk_answers[2 * index + 1] == _exact(RECORDS, query, QUIET, 10)
    assert len(_dump(url)["vectors"]) == RECORDS


async def test_readers_during_a_bulk_load_get_exact_answers(url: str, store: FullStore) -> None:
    reader = open_store(url)  # another store: another process's view
    await reader.setup()
    try:
        async with store.bulk_load(RECORDS):
            await _write(store, 0, 2 * BATCH)
            assert not _has_hnsw(url)  # the index is away while the load runs
            for query in QUERIES:
                assert await _nearest(reader, query, BUSY, 10) == _exact(2 * BATCH, query, BUSY, 10)
                assert await _nearest(reader, query, QUIET, 5) == _exact(2 * BATCH, query, QUIET, 5)
            # A store opening meanwhile leaves the index to the load (its lock is held).
            late = open_store(url)
            await late.setup()
            await late.close()
            assert not _has_hnsw(url)
            await _write(store, 2 * BATCH, RECORDS)
        assert _has_hnsw(url)
        for query in QUERIES:
            assert await _nearest(reader, query, BUSY, 10) == _exact(RECORDS, query, BUSY, 10)
    finally:
        await reader.close()


async def test_a_small_load_keeps_the_index(url: str, store: FullStore) -> None:
    async with store.bulk_load(RECORDS):
        await _write(store, 0, RECORDS)
    # 1,000 more against 6,000 stored: under a quarter, so row by row, the index kept.
    more = _records(RECORDS + 1_000)[RECORDS:]
    vectors = _vectors(1_000, seed=9)
    async with store.bulk_load(len(more)):
        await store.add_records(more[:BATCH], [v.tolist() for v in vectors[:BATCH]], "test-embed")
        assert _has_hnsw(url)
    assert _sql(url, f"SELECT count(*) FROM memory_vectors_{DIMS}") == [(RECORDS + BATCH,)]


async def test_bad_input_in_a_bulk_load_stores_nothing_of_its_batch_and_the_index_comes_back(
    url: str, store: FullStore
) -> None:
    bad = [v.tolist() for v in VECTORS_ALL[2 * BATCH : 3 * BATCH]]
    bad[17][3] = math.nan

    async def load() -> None:
        async with store.bulk_load(RECORDS):
            await _write(store, 0, 2 * BATCH)
            await store.add_records(RECORDS_ALL[2 * BATCH : 3 * BATCH], bad, "test-embed")

    with pytest.raises(InputError, match="vector of record"):
        await load()
    assert _has_hnsw(url)
    assert await store.count_records(AGENT) == 2 * BATCH
    for query in QUERIES:
        assert await _nearest(store, query, BUSY, 10) == _exact(2 * BATCH, query, BUSY, 10)
    # The rest loads afterwards; nothing is doubled.
    async with store.bulk_load(RECORDS - 2 * BATCH):
        await _write(store, 2 * BATCH, RECORDS)
    assert await store.count_records(AGENT) == RECORDS
    assert _sql(url, f"SELECT count(*) FROM memory_vectors_{DIMS}") == [(RECORDS,)]


_LOADER = """
import asyncio, sys
import numpy as np
from persyn.store import open_store
sys.path.insert(0, {tests!r})
from test_postgres_bulk_load import AGENT, START, _write, BATCH, RECORDS

async def main():
    store = open_store({url!r})
    await store.setup()
    await store.ensure_agent(AGENT, "Ada", START)
    async with store.bulk_load(RECORDS):
        for first in range(0, RECORDS, BATCH):
            await _write(store, first, first + BATCH)
            print(first + BATCH, flush=True)
            if first + BATCH == 3 * BATCH:
                sys.stdin.readline()  # held here until killed

asyncio.run(main())
"""


def _kill_a_loader_after_three_batches(url: str, tmp_path: Path) -> None:
    """Run a bulk load in another process and SIGKILL it once three batches are committed;
    return when the server has ended its sessions."""
    loader_url = f"{url}&application_name=bulk_loader"
    script = tmp_path / "loader.py"
    script.write_text(_LOADER.format(tests=str(Path(__file__).parent), url=loader_url))
    with subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            lines = [process.stdout.readline().strip() for _ in range(3)]
            assert lines == [str(BATCH), str(2 * BATCH), str(3 * BATCH)]
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    # The server ends the killed client's sessions (and so its locks) when it sees them gone.
    while _sql(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bulk_loader'") != [(0,)]:
        time.sleep(0.05)


async def test_a_bulk_load_killed_half_way_leaves_a_working_store_and_the_index_back(
    url: str, tmp_path: Path
) -> None:
    _kill_a_loader_after_three_batches(url, tmp_path)
    assert not _has_hnsw(url)
    checks = {check.name: check for check in await postgres_checks(url)}
    assert checks["vector index"].warning
    assert checks["vector index"].detail.startswith(f"memory_vectors_{DIMS} without its HNSW index")

    reopened = open_store(url)
    await reopened.setup()  # rebuilds the missing index
    try:
        assert _has_hnsw(url)
        assert await reopened.count_records(AGENT) == 3 * BATCH
        for query in QUERIES:
            assert await _nearest(reopened, query, BUSY, 10) == _exact(3 * BATCH, query, BUSY, 10)
        async with reopened.bulk_load(RECORDS):  # the rest, as a re-run would
            await _write(reopened, 0, RECORDS)
        assert await reopened.count_records(AGENT) == RECORDS
        assert _has_hnsw(url)
    finally:
        await reopened.close()
    assert "vector index" not in {check.name for check in await postgres_checks(url)}


async def test_a_store_copy_into_postgresql_loads_vectors_in_bulk(url: str, tmp_path: Path) -> None:
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    source = open_store(source_url)
    await source.setup()
    try:
        await source.ensure_agent(AGENT, "Ada", START)
        await _write(source, 0, RECORDS)
    finally:
        await source.close()
    seen: list[tuple[int, int]] = []
    report = await copy_store(source_url, url, progress=lambda done, total: seen.append((done, total)))
    assert not report.mismatched
    assert ("vectors:8", RECORDS, RECORDS) in [(t.name, t.source, t.target) for t in report.tables]
    assert _has_hnsw(url)
    target = open_store(url)
    await target.setup()
    try:
        for query in QUERIES:
            assert await _nearest(target, query, BUSY, 10) == _exact(RECORDS, query, BUSY, 10)
    finally:
        await target.close()
