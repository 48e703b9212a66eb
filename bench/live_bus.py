"""How fast the live bus carries a turn's tokens to the process showing them (issue 20 item 3,
ARCHITECTURE §5): Redis pub/sub against PostgreSQL's LISTEN/NOTIFY.

Two buses in this process stand for the two processes (each has its own publishing and
listening connections to the server, as a process does). For each bus:

- `one delta`: a single delta, sent when the previous one has been shown; the time from the
  worker's sink call to the front's channel sink (p50/p99 over `--tokens`);
- `burst`: `--burst` deltas put at once (the way a fast local model streams), the time until
  the front has shown all of them, and how many messages they were joined into.

    uv run python bench/live_bus.py [--tokens 200] [--burst 1500] [--postgres URL | --no-postgres]

It starts its own redis-server (Debian's) on a free loopback port, and a PostgreSQL with
pgserver unless given a URL. Measured 2026-12-02 on the shared 2-core VM (load 4.4-4.6), two
runs back to back:

    bus           delta p50 ms  delta p99 ms  burst ms  messages
    redis                 0.23          0.43      18.1         1
    postgresql            0.28          1.35      16.6         2
    redis                 0.20          0.37      29.1         1
    postgresql            0.29          3.40      15.9         2

Both carry a token in well under a millisecond on one host; neither is what a viewer waits
for (a model's tokens come tens of milliseconds apart). PostgreSQL's 8000-byte payload limit
splits a burst into more messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from persyn.core.events import Event
from persyn.gateway.base import SinkEvent
from persyn.runtime.delivery.bus import PostgresLiveBus, RelayBus
from persyn.runtime.delivery.redis_bus import RedisLiveBus
from persyn.testing.harness import RecordingChannel
from persyn.testing.redis_server import RedisForTests


async def _nothing(service: str, agent_id: str) -> int:
    del service, agent_id
    return 0


async def _measure(
    front: RelayBus, worker: RelayBus, tokens: int, burst: int
) -> tuple[list[float], float, int]:
    channel = RecordingChannel()  # a channel that streams tokens, so the event wants them
    streamed: list[str] = []
    arrived = asyncio.Event()

    def shown(item: SinkEvent) -> None:
        streamed.append(item.text)
        arrived.set()

    await front.start(_nothing, lambda event: shown)
    await worker.start(_nothing, lambda event: None)
    try:
        event = front.taken_in(
            Event(
                id="01JBENCH000000000000000000",
                agent_id="ADA",
                service="test",
                channel="room",
                text="hello",
                received_at=datetime.now(UTC),
            ),
            channel,
        )
        sink = worker.remote_sink(event)
        assert sink is not None
        latencies: list[float] = []
        for number in range(tokens):
            arrived.clear()
            started = time.perf_counter()
            sink(SinkEvent(phase="draft", kind="delta", text=f"{number} "))
            await asyncio.wait_for(arrived.wait(), 30)
            latencies.append((time.perf_counter() - started) * 1000)
        before = len(streamed)
        last = f"b{burst - 1} "
        started = time.perf_counter()
        for number in range(burst):
            sink(SinkEvent(phase="draft", kind="delta", text=f"b{number} "))
        async with asyncio.timeout(60):
            while not streamed[-1].endswith(last):
                arrived.clear()
                await arrived.wait()
        burst_ms = (time.perf_counter() - started) * 1000
        assert "".join(streamed[before:]) == "".join(f"b{n} " for n in range(burst))
        return latencies, burst_ms, len(streamed) - before
    finally:
        await front.close()
        await worker.close()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--burst", type=int, default=1500, help="at most 2000 (the bus's queue)")
    parser.add_argument(
        "--postgres", default=None, help="a PostgreSQL URL (default: start one with pgserver)"
    )
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()

    rows: list[tuple[str, list[float], float, int]] = []
    with tempfile.TemporaryDirectory(prefix="persyn-bench-redis-") as directory:
        redis_server = RedisForTests(Path(directory)).start()
        try:
            url = redis_server.url()
            found = await _measure(
                RedisLiveBus(url, "bench"), RedisLiveBus(url, "bench"), args.tokens, args.burst
            )
            rows.append(("redis", *found))
        finally:
            redis_server.stop()
    if not args.no_postgres:
        server = None
        url = args.postgres
        if url is None:
            from persyn.testing.postgres import PostgresForTests

            server = PostgresForTests()
            url = server.url()
        try:
            found = await _measure(PostgresLiveBus(url), PostgresLiveBus(url), args.tokens, args.burst)
            rows.append(("postgresql", *found))
        finally:
            if server is not None:
                server.stop()

    print(f"{'bus':<12}{'delta p50 ms':>14}{'delta p99 ms':>14}{'burst ms':>10}{'messages':>10}   load")
    for name, latencies, burst_ms, messages in rows:
        print(
            f"{name:<12}{statistics.median(latencies):>14.2f}{_percentile(latencies, 0.99):>14.2f}"
            f"{burst_ms:>10.1f}{messages:>10}   {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
