"""How long dialog search (`Store.search_messages`, the `search_dialog` tool's query) takes as
one agent's dialog grows, on SQLite (FTS5, bm25) and PostgreSQL (tsvector + GIN, `ts_rank`).

Both backends rank every message that matches, so a word said in a fifth of all messages
costs more than a rare one: the table shows by how much. The dialog is one agent's, in one
conversation: turn texts of the LoCoMo development split (read from `../shared/bench/`,
never copied here) drawn with a fixed seed, one per second. Messages are bulk-inserted
through the store's own table definitions (the search index is kept by the store's triggers
on SQLite and by the generated `text_tsv` column on PostgreSQL), then each query runs
`--repeat` times after one warm-up run; p50 and p99 in ms.

    uv run python bench/dialog_search.py [--sizes 10000,100000] [--store sqlite,postgresql]

`--store postgresql` starts a pgserver of its own (PyPI `pgserver`, PostgreSQL 16) in a
temporary directory and removes it afterwards.

Measured on the 2-core development machine, 2026-12-03 (p50 ms; a word in ~19 % / ~1.3 % of the
messages / a rare word):

    before (SQLite's plain JOIN walked the agent's messages and ran the match per message):
    sqlite      10,000   913.6 / 456.5 / 357.0   (load 5.5; a query matching nothing: 1001.8)
    sqlite     100,000   love (~10 %) 28,567; 7,251 / 4,208   (load 6.5; stopped there)
    after (`search_messages_query`, the full-text index first), load ~1:
    sqlite      10,000     2.0 /   0.9 /   0.6
    sqlite     100,000    11.6 /   2.3 /   1.0
    postgresql  10,000     3.6 /   1.6 /   1.4
    postgresql 100,000    22.5 /   3.8 /   1.6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, insert
from sqlalchemy.engine import make_url

from persyn.core.ids import new_id
from persyn.store import open_store
from persyn.store.capabilities import FullStore
from persyn.store.ports.dialog import Role
from persyn.store.postgres.engine import driver_url
from persyn.store.schema.tables import messages

_BENCH_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo_dev.json"
_START = datetime(2026, 1, 1, tzinfo=UTC)
# From rare to said in a fifth of the LoCoMo turns; none is an English stop word, so both
# backends search every one (PostgreSQL's english configuration drops stop words).
_QUERIES = ("abstract", "painting", "think", "love", "really", "great", "music camping")
_BATCH = 5_000


def _turn_texts(path: Path) -> list[str]:
    if not path.exists():
        raise SystemExit(f"benchmark data not found: {path} (the LoCoMo split in ../shared/bench/)")
    texts: list[str] = []
    for sample in json.loads(path.read_text()):
        for value in sample["conversation"].values():
            if isinstance(value, list):
                texts += [turn["text"] for turn in value if isinstance(turn, dict) and turn.get("text")]
    return texts


def _share(texts: Sequence[str], query: str) -> float:
    """About how many of `texts` match `query` (each word as a word prefix; the stores stem)."""
    patterns = [re.compile(rf"\b{re.escape(word)}", re.IGNORECASE) for word in query.split()]
    return sum(all(p.search(t) for p in patterns) for t in texts) / len(texts)


@contextmanager
def _database(store_kind: str) -> Iterator[str]:
    """A fresh, empty database of that kind, as a store URL."""
    if store_kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="persyn-dialog-bench-") as directory:
            yield f"sqlite:///{directory}/persyn.db"
        return
    from persyn.testing.postgres import PostgresForTests

    server = PostgresForTests()
    try:
        yield server.fresh_database("dialog")
    finally:
        server.stop()


def _fill(url: str, agent_id: str, conversation_id: str, said: Sequence[str]) -> None:
    """Bulk-insert one message per text, a second apart, through the store's table."""
    parsed = make_url(url)
    engine = create_engine(driver_url(parsed) if parsed.get_backend_name() == "postgresql" else parsed)
    try:
        with engine.begin() as connection:
            for first in range(0, len(said), _BATCH):
                rows = []
                for offset, body in enumerate(said[first : first + _BATCH], start=first):
                    at = _START + timedelta(seconds=offset + 1)
                    rows.append(
                        {"id": new_id(at), "agent_id": agent_id, "conversation_id": conversation_id,
                         "role": Role.USER.value, "person_id": None, "speaker_name": "Caroline",
                         "text": body, "created_at": at, "event_id": None}
                    )  # fmt: skip
                connection.execute(insert(messages), rows)
        if parsed.get_backend_name() == "postgresql":
            # What autovacuum does soon after a bulk insert: the GIN index's pending list
            # (fastupdate) merged and statistics taken. Without it every search also scans
            # the pending list (~20 ms at 100,000 messages, whatever the query).
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.exec_driver_sql("VACUUM ANALYZE messages")
    finally:
        engine.dispose()


async def _measure(store: FullStore, agent_id: str, query: str, repeat: int) -> tuple[float, float, int]:
    found = await store.search_messages(agent_id, query)  # warm-up
    times: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        await store.search_messages(agent_id, query)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, round(0.99 * (len(times) - 1)))], len(found)


async def _run(store_kind: str, size: int, texts: Sequence[str], repeat: int) -> None:
    said = random.Random(size).choices(texts, k=size)
    with _database(store_kind) as url:
        store = open_store(url)
        await store.setup()
        try:
            agent_id = new_id(_START)
            conversation = await store.open_conversation(agent_id, "terminal", "main", (), _START, 3600)
            started = time.perf_counter()
            _fill(url, agent_id, conversation.id, said)
            filled = time.perf_counter() - started
            print(
                f"{store_kind} {size:,} messages inserted in {filled:.1f} s (load {os.getloadavg()[0]:.1f})"
            )
            for query in _QUERIES:
                p50, p99, found = await _measure(store, agent_id, query, repeat)
                share = _share(said, query)
                print(
                    f"{store_kind:>10} {size:>9,} {query:>14} {share:>7.1%} {found:>5} {p50:>8.1f} {p99:>8.1f}"
                )
        finally:
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="messages in the agent's dialog, per run")
    parser.add_argument("--store", default="sqlite,postgresql", help="sqlite, postgresql or both")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per query")
    parser.add_argument("--data", type=Path, default=_BENCH_DATA, help="the LoCoMo development split")
    args = parser.parse_args()
    kinds = [kind.strip() for kind in args.store.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in ("sqlite", "postgresql")]
    if unknown or not kinds:
        parser.error(f"--store takes sqlite, postgresql or both, not {args.store!r}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    texts = _turn_texts(args.data)
    print(
        f"{'store':>10} {'messages':>9} {'query':>14} {'≈share':>7} {'found':>5} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for kind in kinds:
        for size in (int(s) for s in args.sizes.split(",") if s.strip()):
            asyncio.run(_run(kind, size, texts, args.repeat))


if __name__ == "__main__":
    main()
