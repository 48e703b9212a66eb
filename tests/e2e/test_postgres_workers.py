"""Several `persyn worker` processes on one PostgreSQL (issue 20 item 2): the store and DBOS's
system tables in one database, the per-agent partitioned queue as the lock across processes.
A worker killed with -9 mid-turn, on another "host" (its own home, its own executor id), has
its turn taken over by a live worker: one reply, one transmit, one bill per model call.
Real processes, a real PostgreSQL (pgserver)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn, stop_gracefully
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from persyn.testing.postgres import PostgresForTests

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _query(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    except Exception:  # not created yet
        return []
    finally:
        engine.dispose()


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _usage(*homes: Path) -> list[dict[str, Any]]:
    lines = [
        line
        for home in homes
        if (home / "usage.jsonl").exists()
        for line in (home / "usage.jsonl").read_text().splitlines()
    ]
    return [json.loads(line) for line in lines if line.strip()]


def _status(url: str, event_id: str) -> tuple[str, str] | None:
    rows = _query(
        url, "SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = :id", id=event_id
    )
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


def test_a_worker_killed_mid_turn_is_taken_over_by_another_host_exactly_once(
    persyn: Persyn, postgres_server: PostgresForTests
) -> None:
    url = postgres_server.fresh_database("workers")
    # The second "host": a home of its own with the same persyn.toml (the same agents) and its
    # own executor id, so neither slot lock files nor a shared id can hand it the dead one's work.
    other = Persyn(home=persyn.home.parent / "host-b", env=dict(persyn.env))
    other.home.mkdir(parents=True)
    shutil.copy(persyn.home / "persyn.toml", other.home / "persyn.toml")
    fast = {"PERSYN_STORAGE_URL": url, "PERSYN_DISPATCH__DEAD_EXECUTOR_SECONDS": "0.5"}

    first = persyn.start_daemon(
        "worker", env={**fast, "PERSYN_DISPATCH__DEBUG_TRANSMIT_DELAY_SECONDS": "600"}
    )
    second: subprocess.Popen[bytes] | None = None
    try:
        sent = persyn.run("send", "--no-wait", "Please remember the blue door.", PERSYN_STORAGE_URL=url)
        assert sent.returncode == 0, sent.stderr
        event_id = sent.stdout.strip()
        # every step before transmit is checkpointed; the first worker sleeps before transmit
        _wait_for(
            lambda: bool(
                _query(
                    url,
                    "SELECT 1 FROM dbos.operation_outputs WHERE workflow_uuid = :id "
                    "AND function_name = 'persyn.decide' AND completed_at_epoch_ms IS NOT NULL",
                    id=event_id,
                )
            ),
            90,
            "the steps before transmit",
        )
        running = _status(url, event_id)
        assert running is not None and running[0] == "PENDING" and running[1].startswith("worker-0@")
        second = other.start_daemon("worker", env={**fast, "PERSYN_DISPATCH__EXECUTOR_ID": "host-b-worker"})
        assert _status(url, event_id) == running  # a live executor's turn is never taken
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        _wait_for(lambda: _status(url, event_id) == ("SUCCESS", "host-b-worker"), 90, "the turn taken over")
    finally:
        stop_gracefully(first)
        if second is not None:
            stop_gracefully(second)

    replies = _query(url, "SELECT text FROM messages WHERE role = 'agent' AND event_id = :id", id=event_id)
    assert replies == [("You said: Please remember the blue door.",)]
    outbox = _query(url, "SELECT count(*) FROM outbox WHERE event_id = :id", id=event_id)
    assert outbox == [(1,)]
    marker = _query(url, "SELECT transmitted FROM completion_markers WHERE event_id = :id", id=event_id)
    assert marker == [(True,)]
    stages = sorted(str(u["stage"]) for u in _usage(persyn.home, other.home) if u["thread_id"] == event_id)
    assert "respond" in stages and len(stages) == len(set(stages)), f"a model call was billed twice: {stages}"
    assert not (other.home / "usage.jsonl").exists() or all(
        u["thread_id"] != event_id for u in _usage(other.home)
    )  # the model calls were the first worker's; the second only transmitted


@pytest.mark.parametrize("worker_count", [2, 3])
def test_workers_share_three_agents_in_order_each_event_answered_once(
    persyn: Persyn, postgres_server: PostgresForTests, tmp_path: Path, worker_count: int
) -> None:
    url = postgres_server.fresh_database("share")
    for name in ("Bo", "Cy"):
        assert persyn.run("init", "--name", name).returncode == 0
    script = tmp_path / "slow.json"  # long enough that one worker alone cannot keep the others idle
    script.write_text(json.dumps([{"task": "respond", "reply": "Noted.", "sleep_ms": 700}]))
    env = {
        "PERSYN_STORAGE_URL": url,
        "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
        "PERSYN_DISPATCH__WORKER_CONCURRENCY": "1",  # one turn at a time per process
    }
    sent: dict[str, list[str]] = {}
    # Queued before any worker runs, so every worker finds work waiting: one message per agent
    # more than there are workers, so no worker alone can drain the queue before the last starts.
    for number in range(worker_count + 1):
        for agent in ("Ada", "Bo", "Cy"):
            done = persyn.run("send", "--no-wait", "--agent", agent, f"{agent} message {number}", env=env)
            assert done.returncode == 0, done.stderr
            sent.setdefault(agent, []).append(done.stdout.strip())
    events = [event for ids in sent.values() for event in ids]
    workers = [persyn.popen("worker", **env) for _ in range(worker_count)]
    try:
        _wait_for(
            lambda: all((_status(url, event) or ("",))[0] == "SUCCESS" for event in events),
            180,
            "every reply",
        )
    finally:
        for worker in workers:
            stop_gracefully(worker)

    for agent, ids in sent.items():
        rows = _query(
            url,
            "SELECT m.event_id FROM messages m WHERE m.role = 'agent' AND m.event_id = ANY(:ids) "
            "ORDER BY m.created_at, m.id",
            ids=ids,
        )
        assert [str(r[0]) for r in rows] == ids, f"{agent}'s replies out of order or not once each"
    executors = {(_status(url, event) or ("", ""))[1] for event in events}
    assert len(executors) == worker_count, f"a worker got no turn: {executors}"
    responds = [u for u in _usage(persyn.home) if u["thread_id"] in events and u["stage"] == "respond"]
    assert sorted(str(u["thread_id"]) for u in responds) == sorted(events)  # one bill per turn
