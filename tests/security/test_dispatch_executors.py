"""Every worker process has its own DBOS executor id (issue 13, item 2).

With one default id for every process, a second process started while `persyn run` was
mid-turn recovered that turn at its launch and ran its unfinished step again: the respond
call twice. Now a process recovers only its own work (a restarted one gets its old id back)
and that of dead executors of its host.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.runtime.durable._executor import adopt_dead_executors, claim_executor_slot, host_name


# slots ------------------------------------------------------------------------------------
def test_a_second_live_process_gets_another_slot_and_a_restarted_one_its_own(tmp_path: Path) -> None:
    host = host_name()
    first = claim_executor_slot(tmp_path, "run")
    second = claim_executor_slot(tmp_path, "run")
    chat = claim_executor_slot(tmp_path, "chat")
    assert (first.executor_id, second.executor_id, chat.executor_id) == (
        f"run-0@{host}",
        f"run-1@{host}",
        f"chat-0@{host}",
    )
    first.release()  # the first process dies (the kernel releases its lock the same way)
    restarted = claim_executor_slot(tmp_path, "run")
    assert restarted.executor_id == f"run-0@{host}"
    for slot in (second, chat, restarted):
        slot.release()


def test_only_dead_executors_of_this_host_are_adopted(tmp_path: Path) -> None:
    host = host_name()
    own = claim_executor_slot(tmp_path, "chat")
    alive = claim_executor_slot(tmp_path, "run")
    dead = claim_executor_slot(tmp_path, "run")
    dead.release()
    (tmp_path / "run-0@elsewhere.lock").write_text("run-0@elsewhere pid 1\n")  # another host's
    recovered: list[list[str]] = []
    assert adopt_dead_executors(tmp_path, own.executor_id, recovered.append) == [f"run-1@{host}"]
    assert recovered == [[f"run-1@{host}"]]
    # The dead slot is free again afterwards: its owner restarting gets it back.
    assert claim_executor_slot(tmp_path, "run").executor_id == f"run-1@{host}"
    own.release()
    alive.release()


# processes --------------------------------------------------------------------------------
def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _dbos(home: Path, sql: str, *params: str) -> list[tuple[object, ...]]:
    path = home / "data" / "dbos.sqlite"
    if not path.exists():
        return []
    try:
        with sqlite3.connect(path, timeout=5) as db:
            return db.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # not created yet, or busy
        return []


def _step_done(home: Path, workflow_id: str, step: str) -> bool:
    sql = (
        "SELECT 1 FROM operation_outputs WHERE workflow_uuid = ? AND function_name = ?"
        " AND completed_at_epoch_ms IS NOT NULL"
    )
    return bool(_dbos(home, sql, workflow_id, step))


def _calls_before_transmit(home: Path, workflow_id: str) -> bool:
    """Inline, the whole turn is one step (`persyn.turn`); every model call before transmit is
    checkpointed by the gateway as it returns: respond, the two critics, the decision."""
    try:
        with sqlite3.connect(home / "data" / "persyn.db", timeout=5) as db:
            rows = db.execute("SELECT count(*) FROM model_calls WHERE workflow_id = ?", (workflow_id,))
            return int(rows.fetchone()[0]) == 4
    except sqlite3.OperationalError:  # not migrated yet, or busy
        return False


def _workflow(home: Path, workflow_id: str) -> tuple[object, ...] | None:
    rows = _dbos(home, "SELECT status, executor_id FROM workflow_status WHERE workflow_uuid = ?", workflow_id)
    return rows[0] if rows else None


def _messages(home: Path, event_id: str, role: str) -> list[str]:
    with sqlite3.connect(home / "data" / "persyn.db", timeout=10) as db:
        rows = db.execute("SELECT text FROM messages WHERE role = ? AND event_id = ?", (role, event_id))
        return [str(r[0]) for r in rows.fetchall()]


def _usage_lines(home: Path, thread_id: str) -> list[dict[str, object]]:
    """Every line of the ledger file for a thread: one per physical model call."""
    path = home / "usage.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if line["thread_id"] == thread_id]


def _stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_second_process_does_not_re_run_a_turn_in_flight(persyn: Persyn, tmp_path: Path) -> None:
    rules = tmp_path / "slow_respond.json"
    # The first daemon's respond call takes 12 s: the second starts while it is in flight.
    rules.write_text(json.dumps([{"task": "respond", "sleep_ms": 12_000}]))
    first = persyn.start_daemon("run", PERSYN_MODELS__DEFAULT=f"test:script@{rules}")
    second: subprocess.Popen[bytes] | None = None
    try:
        sent = persyn.run("send", "--no-wait", "Please remember the blue door.")
        assert sent.returncode == 0, sent.stderr
        event_id = sent.stdout.strip()
        # The input is stored inside the respond step, just before the model is called.
        _wait_for(lambda: _messages(persyn.home, event_id, "user") != [], 60, "the respond call")
        second = persyn.start_daemon("run")  # fast model: a re-run would finish at once
        assert not _step_done(persyn.home, event_id, "persyn.turn"), (
            "the second daemon started too late to prove anything"
        )
        _wait_for(lambda: _messages(persyn.home, event_id, "agent") != [], 120, "the reply")
        _wait_for(lambda: (_workflow(persyn.home, event_id) or ("",))[0] == "SUCCESS", 60, "the outcome")
    finally:
        _stop(first, *([second] if second is not None else []))

    assert _messages(persyn.home, event_id, "agent") == ["You said: Please remember the blue door."]
    responds = [line for line in _usage_lines(persyn.home, event_id) if line["stage"] == "respond"]
    assert len(responds) == 1, f"the respond call ran {len(responds)} times"
    assert _workflow(persyn.home, event_id) == ("SUCCESS", f"run-0@{host_name()}")


@pytest.mark.e2e
@pytest.mark.slow
def test_a_killed_daemon_restarted_beside_a_live_one_recovers_its_own_turn(persyn: Persyn) -> None:
    first = persyn.start_daemon("run", PERSYN_DISPATCH__DEBUG_TRANSMIT_DELAY_SECONDS="600")
    others: list[subprocess.Popen[bytes]] = []
    try:
        sent = persyn.run("send", "--no-wait", "Please remember the blue door.")
        assert sent.returncode == 0, sent.stderr
        event_id = sent.stdout.strip()
        _wait_for(lambda: _calls_before_transmit(persyn.home, event_id), 60, "the calls before transmit")
        others.append(persyn.start_daemon("run"))  # run-1: alive throughout, never takes it over
        assert _messages(persyn.home, event_id, "agent") == []
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        others.append(persyn.start_daemon("run"))  # gets run-0 back and recovers its turn
        _wait_for(lambda: _messages(persyn.home, event_id, "agent") != [], 60, "the reply after restart")
        _wait_for(lambda: (_workflow(persyn.home, event_id) or ("",))[0] == "SUCCESS", 60, "the outcome")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        _stop(*others)

    assert _messages(persyn.home, event_id, "agent") == ["You said: Please remember the blue door."]
    stages = sorted(str(line["stage"]) for line in _usage_lines(persyn.home, event_id))
    assert len(stages) == len(set(stages)) == 4, f"a model call was repeated: {stages}"
    # The restarted daemon got the dead one's id back (DBOS recovered its work at launch;
    # whichever live worker claims the re-enqueued turn then finishes it).
    slots = persyn.home / "data" / "executors"
    assert (slots / f"run-0@{host_name()}.lock").read_text() == f"run-0@{host_name()} pid {others[1].pid}\n"
    assert (slots / f"run-1@{host_name()}.lock").read_text() == f"run-1@{host_name()} pid {others[0].pid}\n"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_worker_of_another_role_adopts_the_turn_of_a_dead_executor(persyn: Persyn) -> None:
    first = persyn.start_daemon("run", PERSYN_DISPATCH__DEBUG_TRANSMIT_DELAY_SECONDS="600")
    worker: subprocess.Popen[bytes] | None = None
    try:
        sent = persyn.run("send", "--no-wait", "Please remember the blue door.")
        assert sent.returncode == 0, sent.stderr
        event_id = sent.stdout.strip()
        _wait_for(lambda: _calls_before_transmit(persyn.home, event_id), 60, "the calls before transmit")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        # worker-0, not run-0: DBOS would recover nothing of run-0's at its launch; the dead
        # slot's lock file is free, so the worker adopts its turn.
        worker = persyn.start_daemon("worker")
        _wait_for(lambda: _messages(persyn.home, event_id, "agent") != [], 60, "the adopted reply")
        _wait_for(lambda: (_workflow(persyn.home, event_id) or ("",))[0] == "SUCCESS", 60, "the outcome")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if worker is not None:
            _stop(worker)

    assert _messages(persyn.home, event_id, "agent") == ["You said: Please remember the blue door."]
    stages = sorted(str(line["stage"]) for line in _usage_lines(persyn.home, event_id))
    assert len(stages) == len(set(stages)) == 4, f"a model call was repeated: {stages}"
    assert _workflow(persyn.home, event_id) == ("SUCCESS", f"worker-0@{host_name()}")
