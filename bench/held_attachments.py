"""How long `DialogHistoryPort.held_attachments` (the daily sweep of kept originals, issue 35)
takes as one agent's memory grows, on SQLite and PostgreSQL.

One agent with `size` events, one memory per event (naming its input message and `--ids` - 1
other message ids: a conversation's worth), and one event in twenty with a file; half of those files' memories are gone (so
half the files are free). Rows are bulk-inserted through the store's own table definitions;
the call runs `--repeat` times after one warm-up; p50 in ms and what it found.

    uv run python bench/held_attachments.py [--sizes 1000,10000] [--store sqlite,postgresql]

Measured on the 2-core development machine, 2026-12-07 (p50 ms; 20 message ids per memory; the
machine shared by six sessions, load 12-14):

    before (every memory's `message_ids` loaded into Python and matched there):
    sqlite       1,000 events    44.0    10,000 events   536.0
    postgresql   1,000 events    40.0    10,000 events  1176.7
    after (matched in SQL: `json_each` / `json_array_elements_text`, only the files' messages):
    sqlite       1,000 events    40.4    10,000 events   235.5
    postgresql   1,000 events    34.3    10,000 events   243.7
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, insert
from sqlalchemy.engine import make_url

from persyn.core.events import inbound_message_id
from persyn.core.ids import new_id
from persyn.store import open_store
from persyn.store.postgres.engine import driver_url
from persyn.store.schema.tables import events, memory_records

_START = datetime(2026, 1, 1, tzinfo=UTC)
_BATCH = 1000


@contextmanager
def _database(store_kind: str) -> Iterator[str]:
    """A fresh, empty database of that kind, as a store URL."""
    if store_kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="persyn-held-bench-") as directory:
            yield f"sqlite:///{directory}/persyn.db"
        return
    from persyn.testing.postgres import PostgresForTests

    server = PostgresForTests()
    try:
        yield server.fresh_database("held")
    finally:
        server.stop()


def _fill(url: str, agent_id: str, size: int, ids: int) -> int:
    """`size` events and their memories; returns how many files are still held."""
    parsed = make_url(url)
    engine = create_engine(driver_url(parsed) if parsed.get_backend_name() == "postgresql" else parsed)
    held = 0
    try:
        with engine.begin() as connection:
            for first in range(0, size, _BATCH):
                event_rows, memory_rows = [], []
                for number in range(first, min(size, first + _BATCH)):
                    at = _START + timedelta(seconds=number + 1)
                    event_id = new_id(at)
                    with_file = number % 20 == 0
                    files = (
                        [
                            {
                                "kind": "image",
                                "media_type": "image/png",
                                "size": 10,
                                "reference": f"att-{new_id(at)}",
                            }
                        ]
                        if with_file
                        else []
                    )
                    event_rows.append(
                        {"id": event_id, "agent_id": agent_id, "kind": "message", "service": "test",
                         "channel": "room", "speaker": None, "text": f"message {number}", "received_at": at,
                         "addressed": True, "meta": {}, "attachments": files}
                    )  # fmt: skip
                    if with_file and number % 40 == 20:
                        continue  # this file's memory was culled: it is free
                    held += with_file
                    named = [inbound_message_id(event_id, at), *(new_id(at) for _ in range(ids - 1))]
                    memory_rows.append(
                        {"id": new_id(at), "agent_id": agent_id, "created_at": at, "channel": "test:room",
                         "participant_ids": [], "summary": f"memory {number}", "importance": 3, "tags": [],
                         "emotion": None, "sensitivity": "public", "conversation_id": None,
                         "message_ids": named, "ref": None, "kind": "episode", "embedding_model": None,
                         "dims": None}
                    )  # fmt: skip
                connection.execute(insert(events), event_rows)
                connection.execute(insert(memory_records), memory_rows)
        if parsed.get_backend_name() == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.exec_driver_sql("VACUUM ANALYZE")
    finally:
        engine.dispose()
    return held


async def _run(store_kind: str, size: int, repeat: int, ids: int) -> None:
    with _database(store_kind) as url:
        store = open_store(url)
        await store.setup()
        try:
            agent_id = new_id(_START)
            expected = _fill(url, agent_id, size, ids)
            found = await store.held_attachments(agent_id)  # warm-up
            assert len(found) == expected, (len(found), expected)
            times: list[float] = []
            for _ in range(repeat):
                started = time.perf_counter()
                await store.held_attachments(agent_id)
                times.append((time.perf_counter() - started) * 1000)
            print(
                f"{store_kind:>10} {size:>9,} events {statistics.median(times):>9.1f} ms p50 "
                f"({len(found)} held; load {os.getloadavg()[0]:.1f})"
            )
        finally:
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--store", default="sqlite")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ids", type=int, default=20, help="message ids each memory names")
    args = parser.parse_args()
    for kind in args.store.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            asyncio.run(_run(kind, size, args.repeat, args.ids))


if __name__ == "__main__":
    main()
