"""Candidate methods for a sub-linear vector stage in ONE compartment (issue 20 item 5),
measured against today's exact sqlite-vec search on the same data. A probe, not the store:
it builds its own tables in a temporary file.

Data: `bench/memory_scale.py`'s synthetic records, all in one channel, embedded with the
default encoder (WordLlama, 256 dimensions); 100 of its recall queries. For each method it
prints p50/p99 latency of a k=100 search (the retriever's `[memory] candidates`) and its
recall@10 and recall@100 against exact search.

- `exact`: the store today, a vec0 kNN in the (agent, channel) partition.
- `vec0 bit[] + rerank R`: sign-quantized vectors in a vec0 `bit[dims]` column (Hamming
  kNN of R candidates), the float vector as an auxiliary column, re-ranked by
  `vec_distance_cosine` in the same statement.
- `vec0 IVF nprobe P`: a k-means coarse quantizer (sqrt(N) lists, trained on a sample) and
  the list number as one more vec0 partition key; one kNN per probed list.
- `numpy centred bits + rerank R`: the same sign bits after subtracting the mean vector,
  scanned with numpy popcount, the R best re-ranked exactly (the in-memory cost of the scan
  only: it does not read the bits from SQLite).

    uv run python bench/vector_ann_probe.py [--size 100000] [--queries 100]

Measured 2026-12-02 on the shared 2-core VM under a load of 18.7 (absolute times are
inflated several-fold; compare within one run), 100,000 records, k=100:

    exact (today)                  p50 479 ms   recall@10 1.000
    vec0 bit[] + rerank 200        p50 481 ms   recall@10 0.648
    vec0 bit[] + rerank 1600       p50 712 ms   recall@10 0.926
    vec0 IVF 316 lists, nprobe 8   p50  49 ms   recall@10 0.596
    vec0 IVF 316 lists, nprobe 64  p50 597 ms   recall@10 0.954
    numpy centred bits, R=1000     p50  30 ms   recall@10 0.950
    numpy centred bits, R=2000     p50  74 ms   recall@10 0.981

vec0's cost is per row, not per byte (bit vectors scan no faster than floats), and its
per-partition overhead makes many small IVF lists slow; these synthetic embeddings cluster
weakly, so IVF needs a fifth of the lists probed for recall@10 0.95. Only a scan of centred
sign bits outside vec0 reaches recall@10 >= 0.98 (R = 20 x k) at a fraction of the cost.
The store adopted it in migration 16 (`store/sqlite/ann.py`), with two projections per
dimension instead of the coordinates' signs and an int8 re-rank in memory before the exact
one; `bench/memory_scale.py --vector-stage` measures the store itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from memory_scale import _queries, _records

from persyn.core.config import MemoryConfig
from persyn.memory.embedder import embedder_from_config
from persyn.store.sqlite.engine import _sqlite_vec_path, sqlite_dbapi  # pyright: ignore[reportPrivateUsage]

K = 100
Search = Callable[[np.ndarray[Any, Any]], list[str]]


async def _embed(texts: Sequence[str]) -> np.ndarray[Any, Any]:
    embedder = embedder_from_config(MemoryConfig())
    rows: list[list[float]] = []
    for offset in range(0, len(texts), 4096):
        rows += await embedder.embed(list(texts[offset : offset + 4096]))
    vectors = np.asarray(rows, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _report(name: str, search: Search, queries: np.ndarray[Any, Any], truths: list[list[str]]) -> None:
    timings: list[float] = []
    at10: list[float] = []
    at100: list[float] = []
    for query, truth in zip(queries, truths, strict=True):
        started = time.perf_counter()
        found = search(query)
        timings.append((time.perf_counter() - started) * 1000)
        at10.append(len(set(found[:10]) & set(truth[:10])) / 10)
        at100.append(len(set(found) & set(truth)) / K)
    p99 = sorted(timings)[min(len(timings) - 1, int(0.99 * len(timings)))]
    print(
        f"{name:<34} p50 {statistics.median(timings):7.2f} ms  p99 {p99:7.2f} ms  "
        f"recall@10 {statistics.mean(at10):.3f}  recall@100 {statistics.mean(at100):.3f}",
        flush=True,
    )


def _kmeans(vectors: np.ndarray[Any, Any], lists: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    sample = vectors[rng.choice(len(vectors), min(len(vectors), 50 * lists), replace=False)]
    centroids = sample[rng.choice(len(sample), lists, replace=False)].copy()
    for _ in range(10):
        nearest = np.argmax(sample @ centroids.T, axis=1)
        for j in range(lists):
            members = sample[nearest == j]
            if len(members):
                centroids[j] = members.mean(0)
        centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    return centroids


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000, help="records in the one compartment")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    records = _records("A" * 26, args.size, 1)
    vectors = asyncio.run(_embed([r.summary for r in records]))
    queries = asyncio.run(_embed(_queries(records, args.queries)))
    dims, size = vectors.shape[1], len(vectors)
    rng = np.random.default_rng(0)
    lists = max(1, int(size**0.5))
    centroids = _kmeans(vectors, lists, rng)
    assigned = np.concatenate(
        [np.argmax(vectors[i : i + 20_000] @ centroids.T, axis=1) for i in range(0, size, 20_000)]
    )
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite_dbapi().connect(os.path.join(tmp, "probe.db"))
        db.enable_load_extension(True)
        db.load_extension(_sqlite_vec_path())
        where = "agent_id = 'a' AND channel = 'c'"
        db.execute(
            "CREATE VIRTUAL TABLE exact USING vec0(record_id text primary key, agent_id text partition key, "
            f"channel text partition key, embedding float[{dims}] distance_metric=cosine, chunk_size=256)"
        )
        db.execute(
            "CREATE VIRTUAL TABLE bits USING vec0(record_id text primary key, agent_id text partition key, "
            f"channel text partition key, bits bit[{dims}], +unit blob, chunk_size=256)"
        )
        db.execute(
            "CREATE VIRTUAL TABLE ivf USING vec0(record_id text primary key, agent_id text partition key, "
            "channel text partition key, list integer partition key, "
            f"embedding float[{dims}] distance_metric=cosine, chunk_size=64)"
        )
        rows = [(str(i), vectors[i].tobytes(), int(assigned[i])) for i in range(size)]
        db.executemany("INSERT INTO exact VALUES (?1, 'a', 'c', ?2)", [r[:2] for r in rows])
        db.executemany(
            "INSERT INTO bits VALUES (?1, 'a', 'c', vec_quantize_binary(vec_f32(?2)), ?2)",
            [r[:2] for r in rows],
        )
        db.executemany("INSERT INTO ivf VALUES (?1, 'a', 'c', ?3, ?2)", rows)
        db.commit()

        def exact(query: np.ndarray[Any, Any]) -> list[str]:
            sql = (
                f"SELECT record_id FROM exact WHERE embedding MATCH ? AND k = ? AND {where} ORDER BY distance"
            )
            return [row[0] for row in db.execute(sql, (query.tobytes(), K))]

        def vec0_bits(r: int) -> Search:
            sql = (
                "WITH coarse AS (SELECT record_id, unit FROM bits WHERE bits MATCH "
                f"vec_quantize_binary(vec_f32(?1)) AND k = ?2 AND {where}) "
                "SELECT record_id FROM coarse ORDER BY vec_distance_cosine(unit, ?1) LIMIT ?3"
            )
            return lambda query: [row[0] for row in db.execute(sql, (query.tobytes(), r, K))]

        def vec0_ivf(probes: int) -> Search:
            sql = f"SELECT record_id, distance FROM ivf WHERE embedding MATCH ? AND k = ? AND {where} AND list = ?"

            def search(query: np.ndarray[Any, Any]) -> list[str]:
                found: list[tuple[str, float]] = []
                for chosen in np.argsort(-(centroids @ query))[:probes]:
                    found += db.execute(sql, (query.tobytes(), K, int(chosen))).fetchall()
                return [hit[0] for hit in sorted(found, key=lambda hit: hit[1])[:K]]

            return search

        mean = vectors.mean(0)
        packed = np.packbits((vectors - mean) > 0, axis=1).view(np.uint64)

        def centred_bits(r: int) -> Search:
            def search(query: np.ndarray[Any, Any]) -> list[str]:
                code = np.packbits((query - mean) > 0).view(np.uint64)
                hamming = np.bitwise_count(packed ^ code).sum(1)
                candidates = np.argpartition(hamming, r)[:r]
                best = candidates[np.argsort(-(vectors[candidates] @ query))[:K]]
                return [str(i) for i in best]

            return search

        truths = [exact(query) for query in queries]
        print(f"{size:,} records in one compartment, {dims} dimensions, k={K}, load {os.getloadavg()[0]:.1f}")
        _report("exact (today)", exact, queries, truths)
        for r in (200, 1600):
            _report(f"vec0 bit[] + rerank {r}", vec0_bits(r), queries, truths)
        for probes in (8, 64):
            _report(f"vec0 IVF {lists} lists, nprobe {probes}", vec0_ivf(probes), queries, truths)
        for r in (1000, 2000):
            _report(f"numpy centred bits, R={r}", centred_bits(r), queries, truths)
        db.close()


if __name__ == "__main__":
    main()
