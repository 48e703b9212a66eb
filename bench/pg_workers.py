"""Activations per second with several `persyn worker` processes on one PostgreSQL, against one
worker on SQLite (issue 20 item 2's figure).

For each configuration: a fresh deployment of three agents (`test:echo` model), the workers
started and serving, then a burst of events queued from this process (stored, then enqueued
on DBOS's partitioned queue through a submit-only runtime), timed from the first enqueue to
the last completion marker. CPU ms per activation is the workers' user+system time over the
burst (from /proc), divided by the events.

    uv run python bench/pg_workers.py [--events 90] [--workers 1,2] [--store postgresql://...]

Without --store a PostgreSQL is started with pgserver (a dev dependency). On a shared 2-core
machine the absolute rate moves with other load; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from persyn.core.config import load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.runtime.compose import build_runtime

AGENTS = ("Ada", "Bo", "Cy")


def _env(home: Path, store: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
    env |= {
        "PERSYN_HOME": str(home),
        "PERSYN_MODELS__DEFAULT": "test:echo",
        "PERSYN_CONVERSATION__EXTRACT_EVERY_MESSAGES": "0",
        "PERSYN_DISPATCH__QUEUE_POLLING_SECONDS": "0.1",
    }
    if store:
        env["PERSYN_STORAGE_URL"] = store
    return env


def _cpu_ms(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def _markers(url: str) -> int:
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = create_engine(parsed, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT count(*) FROM completion_markers")).scalar_one())
    finally:
        engine.dispose()


async def _burst(
    home: Path, env: dict[str, str], events: int, database: str, pids: list[int]
) -> tuple[float, float]:
    settings = load_settings(home, environ=env)
    runtime = build_runtime(settings)
    await runtime.start(workers=False)
    try:
        before = _markers(database)
        cpu = _cpu_ms(pids)
        started = time.perf_counter()
        for index in range(events):
            agent = settings.agents[index % len(settings.agents)]
            now = runtime.clock.now()
            event = Event(
                id=new_id(now),
                agent_id=agent.id,
                service="bench",
                channel="bench",
                speaker=Speaker(service="bench", channel="bench", speaker_id="u", display_name="U"),
                text=f"hello #{index}",
                received_at=now,
            )
            await runtime.store.save_event(event)
            await runtime.intake.enqueue_activation(agent.id, event.id)
        while _markers(database) - before < events:  # noqa: ASYNC110 (other processes write them)
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        return events / elapsed, (_cpu_ms(pids) - cpu) / events
    finally:
        await runtime.stop()


def _run(store: str | None, workers: int, events: int) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp(prefix="persyn-bench-")) / "home"
    env = _env(home, store)
    for name in AGENTS:
        subprocess.run(
            [sys.executable, "-m", "persyn", "init", "--name", name], env=env, check=True, capture_output=True
        )
    database = store or f"sqlite:///{home / 'data' / 'persyn.db'}"
    logs = [home.parent / f"worker{i}.log" for i in range(workers)]
    processes = []
    for log in logs:
        with open(log, "wb") as out:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "persyn", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
                )
            )
    try:
        while not all("persyn is serving" in log.read_text(errors="replace") for log in logs):
            if any(p.poll() is not None for p in processes):
                raise SystemExit("a worker exited:\n" + "\n".join(log.read_text() for log in logs))
            time.sleep(0.1)
        return asyncio.run(_burst(home, env, events, database, [p.pid for p in processes]))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=90)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts on PostgreSQL")
    parser.add_argument("--store", help="a PostgreSQL URL (default: a pgserver started here)")
    args = parser.parse_args()
    server = None
    store = args.store
    if store is None:
        from persyn.testing.postgres import PostgresForTests

        server = PostgresForTests()
    try:
        print(
            f"{'backend':<12}{'workers':>8}{'act/s':>9}{'CPU ms/act':>12}   (load {os.getloadavg()[0]:.1f})"
        )
        rate, cpu = _run(None, 1, args.events)
        print(f"{'sqlite':<12}{1:>8}{rate:>9.1f}{cpu:>12.1f}")
        for count in (int(c) for c in args.workers.split(",")):
            url = store if store is not None else server.fresh_database("bench")  # type: ignore[union-attr]
            rate, cpu = _run(url, count, args.events)
            print(f"{'postgresql':<12}{count:>8}{rate:>9.1f}{cpu:>12.1f}   (load {os.getloadavg()[0]:.1f})")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
