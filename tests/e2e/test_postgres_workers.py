"""Several `persyn worker` processes on one PostgreSQL (issue 20 item 2): the store and DBOS's
system tables in one database, the per-agent partitioned queue as the lock across processes.
A worker killed with -9 mid-turn, on one "host" (its own home, its own executor id), has its
turn taken over by a live worker on another: one reply, one transmit, one bill per model call;
the turn queued behind it waits for it; every survivor keeps serving.
Real processes, a real PostgreSQL (pgserver).

These tests start up to four Python processes on a machine that may be busy: every wait is
for a condition in the database or a log, bounded by `PATIENCE`, never a timed assertion."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn, stop_gracefully
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from persyn.testing.postgres import PostgresForTests

# A bound for each wait, not an expectation: on a quiet machine a worker starts in ~5 s and a
# turn takes ~1 s, but under a load of ~19 (six people on two cores) both ran 5-10x slower.
PATIENCE = 600.0

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3 * PATIENCE)]


def _query(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    finally:
        engine.dispose()


def _wait_for(predicate: Callable[[], bool], what: str, *, logs: Sequence[Persyn] = ()) -> None:
    """Poll until `predicate` holds. An error while polling (a table not created yet, a busy
    server) counts as "not yet"; the last one is reported with the workers' logs on timeout."""
    deadline = time.monotonic() + PATIENCE
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:
            last_error = exc
        time.sleep(0.2)
    tails = "".join(f"\n--- {host.home} worker log:\n{host.log('worker')[-3000:]}" for host in logs)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error!r}){tails}")


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


def _answered_by(url: str, event_id: str, what: str, logs: Sequence[Persyn]) -> str:
    """Wait until the turn of `event_id` has succeeded; the executor that ended it."""
    _wait_for(lambda: (_status(url, event_id) or ("",))[0] == "SUCCESS", what, logs=logs)
    return (_status(url, event_id) or ("", ""))[1]


def _send(host: Persyn, message: str, env: Mapping[str, str], *, agent: str = "Ada") -> str:
    done = host.run("send", "--no-wait", "--agent", agent, message, timeout=PATIENCE, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _start_workers(hosts: Sequence[tuple[Persyn, Mapping[str, str]]]) -> list[subprocess.Popen[bytes]]:
    """Start one worker per host at once (each host logs in a folder of its own, so each
    waits for its own banner); every started process is returned before a failure is raised."""
    with ThreadPoolExecutor(len(hosts)) as pool:
        futures = [
            pool.submit(host.start_daemon, "worker", startup_timeout=PATIENCE, env=env) for host, env in hosts
        ]
    started = [future.result() for future in futures if future.exception() is None]
    for future in futures:
        if (error := future.exception()) is not None:
            for process in started:
                stop_gracefully(process)
            raise error
    return started


def _assert_turns_in_order(url: str, agent: str, ids: Sequence[str]) -> None:
    """One agent's turns ran one at a time, in the order sent: each turn's first step started
    after the previous turn's last step ended (DBOS records every step of a turn, whichever
    process ran it), and each has exactly one reply, stored in that order."""
    spans = {
        str(row[0]): (int(row[1]), int(row[2]))
        for row in _query(
            url,
            "SELECT workflow_uuid, min(coalesce(started_at_epoch_ms, completed_at_epoch_ms)), "
            "max(completed_at_epoch_ms) FROM dbos.operation_outputs "
            "WHERE workflow_uuid = ANY(:ids) GROUP BY workflow_uuid",
            ids=list(ids),
        )
    }
    assert sorted(spans) == sorted(ids), f"{agent}: a turn recorded no step"
    for earlier, later in itertools.pairwise(ids):
        assert spans[earlier][1] <= spans[later][0], f"{agent}: {later} ran before {earlier} ended: {spans}"
    replies = _query(
        url,
        "SELECT event_id FROM messages WHERE role = 'agent' AND event_id = ANY(:ids) ORDER BY created_at, id",
        ids=list(ids),
    )
    assert [str(r[0]) for r in replies] == list(ids), f"{agent}'s replies out of order or not once each"


@contextlib.contextmanager
def _queue_held(url: str, ids: Sequence[str]) -> Iterator[None]:
    """While inside, no worker can start these queued turns: a transaction of ours holds their
    queue rows locked, and DBOS's dequeue skips locked rows (`FOR UPDATE SKIP LOCKED`)."""
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as connection, connection.begin():
            held = connection.execute(
                text(
                    "SELECT workflow_uuid FROM dbos.workflow_status WHERE workflow_uuid = ANY(:ids) "
                    "AND status = 'ENQUEUED' FOR UPDATE"
                ),
                {"ids": list(ids)},
            ).all()
            assert len(held) == len(ids), f"only {len(held)} of {len(ids)} turns were waiting in the queue"
            yield
    finally:
        engine.dispose()


def _host(persyn: Persyn, name: str) -> Persyn:
    """Another "host": a home of its own with the same persyn.toml (the same agents), its log
    in a folder of its own."""
    host = Persyn(home=persyn.home.parent / name / "home", env=dict(persyn.env))
    host.home.mkdir(parents=True)
    shutil.copy(persyn.home / "persyn.toml", host.home / "persyn.toml")
    return host


@pytest.mark.parametrize("worker_count", [2, 3])
def test_a_worker_killed_mid_turn_is_taken_over_by_another_host_exactly_once(
    persyn: Persyn, postgres_server: PostgresForTests, worker_count: int
) -> None:
    url = postgres_server.fresh_database("workers")
    # Each survivor on a "host" of its own with its own executor id, so neither slot lock files
    # nor a shared id can hand it the dead one's work: only the PostgreSQL liveness lock can.
    survivors = {
        f"host-{letter}-worker": _host(persyn, f"host-{letter}") for letter in "bcd"[: worker_count - 1]
    }
    hosts = [persyn, *survivors.values()]
    fast = {"PERSYN_STORAGE_URL": url, "PERSYN_DISPATCH__DEAD_EXECUTOR_SECONDS": "0.5"}

    first = persyn.start_daemon(
        "worker",
        startup_timeout=PATIENCE,
        env={**fast, "PERSYN_DISPATCH__DEBUG_TRANSMIT_DELAY_SECONDS": "3600"},
    )
    live: dict[str, subprocess.Popen[bytes]] = {}
    served_later: dict[str, str] = {}  # event sent after the kill -> the survivor that answered it
    try:
        event_id = _send(persyn, "Please remember the blue door.", fast)
        # every model call before transmit is checkpointed (inline, the turn is one step: respond,
        # the two critics, the decision); the first worker sleeps before transmit
        _wait_for(
            lambda: (
                _query(url, "SELECT count(*) FROM model_calls WHERE workflow_id = :id", id=event_id) == [(4,)]
            ),
            "the calls before transmit",
            logs=hosts,
        )
        running = _status(url, event_id)
        assert running is not None and running[0] == "PENDING" and running[1].startswith("worker-0@")
        # Ada's next message is queued behind the stuck turn: it may run only after that one ends.
        queued_behind = _send(persyn, "And the red one.", fast)
        live = dict(
            zip(
                survivors,
                _start_workers(
                    [
                        (host, {**fast, "PERSYN_DISPATCH__EXECUTOR_ID": executor})
                        for executor, host in survivors.items()
                    ]
                ),
                strict=True,
            )
        )
        assert _status(url, event_id) == running  # a live executor's turn is never taken
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=PATIENCE)
        taken_by = _answered_by(url, event_id, "the turn taken over", hosts)
        assert taken_by in survivors, f"the turn ended on {taken_by!r}, not on a survivor"
        _answered_by(url, queued_behind, "the turn queued behind", hosts)
        # Every survivor keeps serving: one more turn at a time; whoever answers it steps down
        # (stopped gracefully), so the next can only be answered by a survivor not yet seen.
        for number in range(len(survivors)):
            later = _send(persyn, f"Follow-up {number}.", fast)
            executor = _answered_by(url, later, f"follow-up {number}", hosts)
            assert executor in live, f"follow-up {number} answered by {executor!r}, not a live survivor"
            served_later[later] = executor
            if len(live) > 1:
                stop_gracefully(live.pop(executor))
    finally:
        stop_gracefully(first)
        for process in live.values():
            stop_gracefully(process)

    assert sorted(served_later.values()) == sorted(survivors)  # each survivor answered one
    events = [event_id, queued_behind, *served_later]
    _assert_turns_in_order(url, "Ada", events)
    replies = _query(url, "SELECT text FROM messages WHERE role = 'agent' AND event_id = :id", id=event_id)
    assert replies == [("You said: Please remember the blue door.",)]
    outbox = _query(
        url, "SELECT event_id, count(*) FROM outbox WHERE event_id = ANY(:ids) GROUP BY event_id", ids=events
    )
    assert sorted(outbox) == sorted((event, 1) for event in events)  # one transmit each
    markers = _query(
        url, "SELECT event_id, transmitted FROM completion_markers WHERE event_id = ANY(:ids)", ids=events
    )
    assert sorted(markers) == sorted((event, True) for event in events)
    ledger = _usage(*(host.home for host in hosts))
    for event in events:
        stages = sorted(str(u["stage"]) for u in ledger if u["thread_id"] == event)
        assert "respond" in stages and len(stages) == len(set(stages)), f"{event} billed twice: {stages}"
    # the stuck turn's model calls were the first worker's; the survivor only transmitted
    assert all(u["thread_id"] != event_id for u in _usage(*(host.home for host in survivors.values())))


@pytest.mark.parametrize("worker_count", [2, 3])
def test_workers_share_three_agents_in_order_each_event_answered_once(
    persyn: Persyn, postgres_server: PostgresForTests, tmp_path: Path, worker_count: int
) -> None:
    url = postgres_server.fresh_database("share")
    for name in ("Bo", "Cy"):
        assert persyn.run("init", "--name", name, timeout=PATIENCE).returncode == 0
    script = tmp_path / "slow.json"  # long enough that one worker alone cannot keep the others idle
    script.write_text(json.dumps([{"task": "respond", "reply": "Noted.", "sleep_ms": 700}]))
    env = {
        "PERSYN_STORAGE_URL": url,
        "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
        "PERSYN_DISPATCH__WORKER_CONCURRENCY": "1",  # one turn at a time per process
    }

    # One message per agent more than there are workers, queued before any worker runs; the
    # three agents' senders side by side, each agent's messages one after another.
    def send_all(agent: str) -> list[str]:
        return [
            _send(persyn, f"{agent} message {number}", env, agent=agent) for number in range(worker_count + 1)
        ]

    with ThreadPoolExecutor(3) as pool:
        sent = dict(zip(("Ada", "Bo", "Cy"), pool.map(send_all, ("Ada", "Bo", "Cy")), strict=True))
    events = [event for ids in sent.values() for event in ids]
    workers: list[subprocess.Popen[bytes]] = []
    try:
        # However unevenly the workers start on a busy machine, none takes a turn before all
        # are serving, so the first up cannot drain the queue alone.
        with _queue_held(url, events):
            workers = [persyn.popen("worker", **env) for _ in range(worker_count)]
            _wait_for(
                lambda: persyn.log("worker").count("persyn is serving") == worker_count,
                "every worker serving",
                logs=[persyn],
            )
            waiting = {(_status(url, event) or ("",))[0] for event in events}
            assert waiting == {"ENQUEUED"}, f"a turn left the held queue: {waiting}"
        _wait_for(
            lambda: all((_status(url, event) or ("",))[0] == "SUCCESS" for event in events),
            "every reply",
            logs=[persyn],
        )
    finally:
        for worker in workers:
            stop_gracefully(worker)

    for agent, ids in sent.items():
        _assert_turns_in_order(url, agent, ids)
    executors = {(_status(url, event) or ("", ""))[1] for event in events}
    assert len(executors) == worker_count, f"a worker got no turn: {executors}"
    responds = [u for u in _usage(persyn.home) if u["thread_id"] in events and u["stage"] == "respond"]
    assert sorted(str(u["thread_id"]) for u in responds) == sorted(events)  # one bill per turn
