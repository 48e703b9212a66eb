"""Vector search on the PostgreSQL store (pgvector HNSW): latency and recall@10 against exact
search, with every record in ONE compartment (the case issue 20 names).

Starts its own PostgreSQL (pgserver, a dev dependency), fills one agent's single channel with
`--records` random unit vectors of `--dims` dimensions through `Store.add_records`, then asks
`--queries` nearest-10 questions through `Store.vector_candidates` and compares each answer
with the exact top 10 computed here in numpy from the same vectors.

    uv run python bench/pg_vectors.py [--records 20000] [--dims 64] [--queries 100]

Random vectors are the hard case for a graph index (no clusters); real embeddings do better.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta

import numpy as np

from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store import open_store
from persyn.testing.postgres import PostgresForTests

CHANNEL = "terminal:terminal"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def run(records: int, dims: int, queries: int) -> None:
    server = PostgresForTests()
    try:
        store = open_store(server.fresh_database("bench"))
        await store.setup()
        rng = np.random.default_rng(7)
        vectors = rng.standard_normal((records, dims)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        agent = new_id(T0)
        ids: list[str] = []
        started = time.perf_counter()
        for start in range(0, records, 1000):
            batch = []
            for i in range(start, min(records, start + 1000)):
                at = T0 + timedelta(seconds=i)
                record = MemoryRecord(
                    id=new_id(at), agent_id=agent, created_at=at, channel=CHANNEL, participant_ids=(),
                    summary=f"note {i}", importance=5, tags=(), sensitivity=Sensitivity.PUBLIC,
                )  # fmt: skip
                batch.append(record)
                ids.append(record.id)
            await store.add_records(
                batch, [list(map(float, v)) for v in vectors[start : start + len(batch)]], "bench"
            )
        fill = time.perf_counter() - started
        probes = rng.standard_normal((queries, dims)).astype(np.float32)
        latencies: list[float] = []
        found = 0
        for probe in probes:
            exact = {ids[i] for i in np.argsort(-(vectors @ (probe / np.linalg.norm(probe))))[:10]}
            began = time.perf_counter()
            hits = await store.vector_candidates(agent, list(map(float, probe)), 10, [CHANNEL])
            latencies.append((time.perf_counter() - began) * 1000)
            found += len(exact & {record_id for record_id, _ in hits})
        await store.close()
        latencies.sort()
        print(
            f"records={records} dims={dims} one compartment: insert {records / fill:.0f}/s, "
            f"vector p50 {statistics.median(latencies):.1f} ms p99 {latencies[int(0.99 * (len(latencies) - 1))]:.1f} ms, "
            f"recall@10 {found / (10 * queries):.3f}"
        )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="pgvector HNSW latency and recall@10 in one compartment")
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--dims", type=int, default=64)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(run(args.records, args.dims, args.queries))


if __name__ == "__main__":
    main()
