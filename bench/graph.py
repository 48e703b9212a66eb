"""The knowledge graph's cost as it grows (SPEC §4.3): upsert rate, and per-turn graph context
(`graph.recall`: mention lookup, n-hop neighbourhood, shortest paths) on the embedded store.

The graph is random with a fixed seed: `--relations` relations among relations/3 entities
(mean degree about 6; real agents' graphs are sparser and cluster, so this is a hard case),
all learned in one compartment with one person present, read through that compartment's view.
Three inputs per size: one naming no entity (every turn pays this), one naming one entity,
one naming two (adds a shortest-path search).

    uv run python bench/graph.py [--relations 1000,10000] [--hops 2] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime

from persyn.core.ids import new_id
from persyn.graph.recall import recall
from persyn.store import open_store
from persyn.store.capabilities import capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import FactSource, GraphView, RelationFact

_BATCH = 500


async def _one(size: int, hops: int, repeat: int) -> list[str]:
    with tempfile.TemporaryDirectory() as home:
        opened = open_store(f"sqlite:///{home}/graph.db")
        await opened.setup()
        try:
            store = capability(opened, GraphPort)
            assert store is not None, "the embedded store has the knowledge graph"
            agent_id, person = new_id(), new_id()
            rng = random.Random(7)
            entities = max(2, size // 3)
            relations = []
            while len(relations) < size:
                a, b = rng.randrange(entities), rng.randrange(entities)
                if a != b:
                    relations.append(
                        RelationFact(source=f"thing {a}", relation="relates to", target=f"thing {b}")
                    )
            source = FactSource(channel="bench:room", participant_ids=(person,), learned_at=datetime.now(UTC))
            started = time.perf_counter()
            for at in range(0, size, _BATCH):
                await store.upsert_graph(agent_id, source, [], relations[at : at + _BATCH])
            upsert = size / (time.perf_counter() - started)
            view = GraphView(channel="bench:room", eligible=("bench:room",), present=(person,))
            inputs = {
                "no entity": "Honestly, what do you think about the weather today, should I go out?",
                "one entity": "What do you know about thing 1?",
                "two entities": "How is thing 1 connected to thing 2?",
            }
            row = [f"{size:,}", f"{upsert:,.0f}/s"]
            for text in inputs.values():
                times: list[float] = []
                for _ in range(repeat):
                    t = time.perf_counter()
                    await recall(store, agent_id, text, view, hops=hops, limit=30, max_path_hops=4)
                    times.append((time.perf_counter() - t) * 1000)
                row.append(f"{statistics.median(times):.1f}")
            return row
        finally:
            await opened.close()


async def _main(sizes: list[int], hops: int, repeat: int) -> None:
    header = ["relations", "upsert", "no entity ms", "one entity ms", "two entities ms"]
    print(f"graph context per turn, hops={hops}, p50 of {repeat}")
    print("  ".join(f"{h:>15}" for h in header))
    for size in sizes:
        row = await _one(size, hops, repeat)
        print("  ".join(f"{c:>15}" for c in row))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--relations", default="1000,10000", help="comma-separated graph sizes")
    parser.add_argument("--hops", type=int, default=2, help="neighbourhood radius ([graph] hops)")
    parser.add_argument("--repeat", type=int, default=20, help="queries timed per input")
    args = parser.parse_args()
    sizes = [int(s) for s in args.relations.split(",") if s.strip()]
    asyncio.run(_main(sizes, args.hops, args.repeat))


if __name__ == "__main__":
    main()
