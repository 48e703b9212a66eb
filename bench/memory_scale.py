"""Recall latency and database size as one agent's memory grows (embedded SQLite store).

For each size, fills a fresh store with synthetic first-person records for one agent —
spread over 10 channels and 50 people, a year of history, summaries drawn from a
Zipf-weighted vocabulary so that common words are common — embedded with the default
encoder and stored through `Store.add_record`. Then runs `--queries` recall queries
through `Retriever.retrieve` (default configuration, one channel, two people present) and
prints retrieval latency p50/p99 for hybrid, vector-only and keyword-only recall, the
insert rate, and the database size (main file + WAL).

    uv run python bench/memory_scale.py [--sizes 10000,100000] [--million] [--queries 200]

1M records take a long while to insert through the port on a small machine (one record a
transaction), so they run only with --million. Deterministic: a fixed seed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from persyn.core.config import MemoryConfig
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory.embedder import Embedder, embedder_from_config
from persyn.memory.retrieval import Mode, Retriever
from persyn.store.sqlite import SQLiteStore

SEED = 20260301
START = datetime(2025, 3, 1, tzinfo=UTC)
NOW = START + timedelta(days=366)
CHANNELS = [f"discord:room-{i}" for i in range(9)] + ["terminal:terminal"]
PEOPLE = [derived_id(START, "person", str(i)) for i in range(50)]
NAMES = [
    "Ann", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ida", "Jo", "Kit", "Lou", "Max", "Ned",
    "Oli", "Pia", "Quin", "Rae", "Sam", "Tess", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe",
]  # fmt: skip
VERBS = [
    "talked about", "argued over", "planned", "laughed about", "worried about", "explained",
    "asked me about", "promised to look into", "remembered", "recommended", "disagreed about",
    "decided on", "shared photos of", "complained about", "celebrated",
]  # fmt: skip
STEMS = [
    "garden", "trip", "budget", "novel", "guitar", "recipe", "marathon", "server", "deadline",
    "wedding", "puppy", "apartment", "painting", "election", "telescope", "bakery", "bicycle",
    "vaccine", "podcast", "chess", "mountain", "river", "concert", "thesis", "startup", "kitchen",
    "camera", "harvest", "museum", "library", "festival", "workshop", "hospital", "garage",
    "violin", "ferry", "glacier", "lantern", "orchard", "quilt",
]  # fmt: skip
MODIFIERS = ["old", "new", "broken", "secret", "family", "weekend", "summer", "winter", "shared", "noisy"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")


def _topics(rng: random.Random, count: int) -> list[str]:
    # A Zipf-like draw over STEMS x MODIFIERS: a few topics are everywhere, most are rare.
    pool = [f"{m} {s}" for s in STEMS for m in MODIFIERS]
    weights = [1.0 / (rank + 1) for rank in range(len(pool))]
    return rng.choices(pool, weights=weights, k=count)


def _summary(rng: random.Random, index: int) -> str:
    who = rng.choice(NAMES)
    first, second = _topics(rng, 2)
    return (
        f"I {rng.choice(VERBS)} the {first} with {who}; {who} {rng.choice(VERBS)} the {second} "
        f"and I said I would follow up (note {index % 997})."
    )


def _records(agent_id: str, count: int) -> list[MemoryRecord]:
    rng = random.Random(SEED)
    spacing = timedelta(days=365) / count
    records: list[MemoryRecord] = []
    for index in range(count):
        at = START + spacing * index
        records.append(
            MemoryRecord(
                id=derived_id(at, agent_id, str(index)),
                agent_id=agent_id,
                created_at=at,
                channel=CHANNELS[index % len(CHANNELS)],
                participant_ids=tuple(rng.sample(PEOPLE, 2)),
                summary=_summary(rng, index),
                importance=rng.randint(1, 10),
                sensitivity=Sensitivity.PUBLIC,
            )
        )
    return records


def _queries(count: int) -> list[str]:
    rng = random.Random(SEED + 1)
    shapes = [
        "what did {who} say about the {topic}?",
        "do you remember the {topic}?",
        "the {topic} and the {other}",
        "did we talk about the {topic} last week?",
    ]
    return [
        rng.choice(shapes).format(who=rng.choice(NAMES), topic=topic, other=other)
        for topic, other in zip(_topics(rng, count), _topics(rng, count), strict=True)
    ]


async def _fill(store: SQLiteStore, embedder: Embedder, records: Sequence[MemoryRecord]) -> float:
    started = time.perf_counter()
    batch = 2048
    for offset in range(0, len(records), batch):
        chunk = records[offset : offset + batch]
        vectors = await embedder.embed([r.summary for r in chunk])
        await asyncio.gather(
            *(store.add_record(r, v, embedder.name) for r, v in zip(chunk, vectors, strict=True))
        )
    return len(records) / (time.perf_counter() - started)


def _size_mb(path: Path) -> float:
    files = [path, path.with_name(path.name + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists()) / 1e6


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(size: int, queries: Sequence[str], tmp: Path) -> str:
    config = MemoryConfig()
    embedder = embedder_from_config(config)
    path = tmp / f"scale-{size}.db"
    store = SQLiteStore(path)
    await store.setup()
    try:
        agent_id = derived_id(START, "scale-agent", str(size))
        await store.ensure_agent(agent_id, "scale", START)
        rate = await _fill(store, embedder, _records(agent_id, size))
        retriever = Retriever(store, embedder, config)
        present = PEOPLE[:2]
        cells: list[str] = []
        for mode in MODES:
            timings: list[float] = []
            for query in queries:
                started = time.perf_counter()
                await retriever.retrieve(
                    agent_id,
                    query,
                    channel=CHANNELS[-1],
                    participants=present,
                    now=NOW,
                    budget_tokens=2_800,
                    mode=mode,
                )
                timings.append((time.perf_counter() - started) * 1000)
            cells.append(f"{statistics.median(timings):>8.1f} {_percentile(timings, 0.99):>8.1f}")
        return f"{size:>9,} {rate:>9.0f} {_size_mb(path):>9.1f} " + " ".join(cells)
    finally:
        await store.close()


async def run(sizes: Sequence[int], query_count: int) -> None:
    queries = _queries(query_count)
    embedder = embedder_from_config(MemoryConfig())
    print(f"encoder {embedder.name}; {query_count} queries per mode; one agent, 10 channels, 50 people\n")
    header = f"{'records':>9} {'insert/s':>9} {'db MB':>9} "
    header += " ".join(f"{m + ' p50':>8} {m[:3] + ' p99':>8}" for m in MODES)
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            row = await _measure(size, queries, Path(tmp))
            print(row, flush=True)
            rows.append(row)
    print()
    print(header + "   (latencies in ms)")
    for row in rows:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated record counts")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 records (slow to insert)")
    parser.add_argument("--queries", type=int, default=200, help="recall queries per mode")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.million:
        sizes.append(1_000_000)
    asyncio.run(run(sizes, args.queries))


if __name__ == "__main__":
    main()
