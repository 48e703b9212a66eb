"""kill -9 a running `persyn run` after the respond step and before transmit (issue 2).

After a restart the reply is transmitted exactly once and the model call that already
happened is neither repeated nor billed twice.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from persyn_cli import Persyn, stop_gracefully

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _usage(home: Path) -> list[dict[str, object]]:
    path = home / "usage.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _step_done(home: Path, workflow_id: str, step: str) -> bool:
    """Whether DBOS has checkpointed a step of a workflow (its output is durable)."""
    path = home / "data" / "dbos.sqlite"
    if not path.exists():
        return False
    try:
        with sqlite3.connect(path, timeout=5) as db:
            rows = db.execute(
                # The row exists from the step's start; it is durable once completed.
                "SELECT 1 FROM operation_outputs WHERE workflow_uuid = ? AND function_name = ?"
                " AND completed_at_epoch_ms IS NOT NULL",
                (workflow_id, step),
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet, or busy
        return False
    return bool(rows)


def _agent_replies(home: Path, event_id: str) -> list[str]:
    with sqlite3.connect(home / "data" / "persyn.db") as db:
        rows = db.execute("SELECT text FROM messages WHERE role = 'agent' AND event_id = ?", (event_id,))
        return [str(r[0]) for r in rows.fetchall()]


def test_kill_between_respond_and_transmit_resumes_exactly_once(persyn: Persyn) -> None:
    # A long gap between the respond step and transmit, so the kill lands inside it.
    daemon = persyn.start_daemon("run", PERSYN_DISPATCH__DEBUG_TRANSMIT_DELAY_SECONDS="600")
    try:
        sent = persyn.run("send", "--no-wait", "Please remember the blue door.")
        assert sent.returncode == 0, sent.stderr
        event_id = sent.stdout.strip()
        # Inline, the whole turn is one step (`persyn.turn`): every model call before transmit
        # is checkpointed by the gateway — respond, then (the reply is substantive and this
        # channel is not interactive) the two critics, then the decision.
        _wait_for(lambda: len(_checkpoints(persyn.home, event_id)) == 4, 60, "the calls before transmit")
        assert _agent_replies(persyn.home, event_id) == []
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()

    restarted = persyn.start_daemon("run")
    try:
        _wait_for(lambda: len(_agent_replies(persyn.home, event_id)) > 0, 60, "the reply after restart")
        time.sleep(1.0)  # give a duplicate transmit every chance to show up
    finally:
        stop_gracefully(restarted)

    replies = _agent_replies(persyn.home, event_id)
    assert replies == ["You said: Please remember the blue door."]
    calls = [u for u in _usage(persyn.home) if u["thread_id"] == event_id]
    stages = sorted(str(u["stage"]) for u in calls)
    assert len(stages) == len(set(stages)) == 4, f"a model call was repeated or re-billed: {stages}"
    assert stages[0].startswith("critique:") and stages[1:] == ["critique:provenance", "decide", "respond"]
    # The completion marker says the reply went out; `send` on a finished event reads it.
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        marker = db.execute(
            "SELECT transmitted, text FROM completion_markers WHERE event_id = ?", (event_id,)
        ).fetchall()
    assert marker == [(1, "You said: Please remember the blue door.")]


def test_kill_inside_a_deferred_turns_step_replays_its_model_calls_instead_of_calling_again(
    persyn: Persyn, tmp_path: Path
) -> None:
    """Deferred mode drafts and decides on the input concurrently, then transmits, all in one
    DBOS step (`persyn.turn`). A kill after both model calls and before transmit re-runs that
    step on restart: the gateway's checkpoints give back both calls (one usage record each,
    the reply the first run drafted), where calling again would now draft another reply and
    decide to stay silent."""
    rules = tmp_path / "mind.json"
    first = (
        "First answer: I will remember the blue door at the end of the garden path, behind the "
        "old oak tree, where we left the spare keys last summer."
    )  # substantive, so its decision on the input is awaited, not cancelled
    rules.write_text(json.dumps([{"task": "respond", "reply": first}]))
    env = {"PERSYN_DELIBERATION__MODE": "deferred", "PERSYN_MODELS__DEFAULT": f"test:script@{rules}"}
    daemon = persyn.start_daemon("run", env=env, PERSYN_DISPATCH__DEBUG_TRANSMIT_DELAY_SECONDS="600")
    try:
        sent = persyn.run("send", "--no-wait", "Please remember the blue door.")
        assert sent.returncode == 0, sent.stderr
        event_id = sent.stdout.strip()
        # Both calls were made and checkpointed; the step waits before transmit (the delay).
        _wait_for(lambda: _turn_stages(persyn.home, event_id) == ["decide", "respond"], 60, "both calls")
        _wait_for(lambda: len(_checkpoints(persyn.home, event_id)) == 2, 60, "both checkpoints")
        assert not _step_done(persyn.home, event_id, "persyn.turn")
        assert _agent_replies(persyn.home, event_id) == []
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()

    # A model called again would now answer otherwise, and decide against answering at all.
    rules.write_text(
        json.dumps(
            [
                {"task": "respond", "reply": "Second answer: a red door."},
                {"task": "decide", "output": {"action": "silent", "reason": "asked twice"}},
            ]
        )
    )
    restarted = persyn.start_daemon("run", env=env)
    try:
        _wait_for(lambda: len(_agent_replies(persyn.home, event_id)) > 0, 60, "the reply after restart")
        _wait_for(lambda: _step_done(persyn.home, event_id, "persyn.turn"), 60, "the turn step's checkpoint")
        time.sleep(1.0)  # give a duplicate transmit every chance to show up
    finally:
        stop_gracefully(restarted)

    assert _agent_replies(persyn.home, event_id) == [first]
    stages = _turn_stages(persyn.home, event_id)
    assert stages == ["decide", "respond"], f"a model call was repeated or re-billed: {stages}"
    with sqlite3.connect(persyn.home / "data" / "dbos.sqlite") as db:
        steps = db.execute(
            "SELECT function_name FROM operation_outputs WHERE workflow_uuid = ? ORDER BY function_id",
            (event_id,),
        ).fetchall()
    names = [name for (name,) in steps]  # then the background deliberation's enqueue
    assert names[0] == "persyn.turn"
    assert not {"persyn.receive_respond", "persyn.decide", "persyn.transmit"} & set(names)


def _checkpoints(home: Path, workflow_id: str) -> list[str]:
    """The keys of the model calls the gateway checkpointed for a workflow."""
    try:
        with sqlite3.connect(home / "data" / "persyn.db", timeout=5) as db:
            rows = db.execute("SELECT call_key FROM model_calls WHERE workflow_id = ?", (workflow_id,))
            return [str(key) for (key,) in rows.fetchall()]
    except sqlite3.OperationalError:  # not migrated yet, or busy
        return []


def _turn_stages(home: Path, event_id: str) -> list[str]:
    """The stages billed for a turn (the background critique runs under its own workflow id)."""
    return sorted(str(u["stage"]) for u in _usage(home) if u["thread_id"] == event_id)


def test_sigterm_keeps_accepted_events(persyn: Persyn) -> None:
    daemon = persyn.start_daemon("run")
    try:
        sent = persyn.run("send", "hello daemon", timeout=120)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.strip() == "You said: hello daemon"
    finally:
        stop_gracefully(daemon)
    assert daemon.returncode == 0
    # Queued while nothing runs: accepted, then answered by the next daemon.
    queued = persyn.run("send", "--no-wait", "are you there?")
    event_id = queued.stdout.strip()
    restarted = persyn.start_daemon("run")
    try:
        _wait_for(lambda: _agent_replies(persyn.home, event_id) != [], 60, "the queued event")
    finally:
        stop_gracefully(restarted)
    assert _agent_replies(persyn.home, event_id) == ["You said: are you there?"]
