"""The heartbeat switches through the real CLI (issue 6): a started agent has one; deleting it
is durable across a daemon restart; restoring wakes it; reminders and goals list cleanly."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _status(persyn: Persyn) -> dict[str, object]:
    done = persyn.run("heartbeat", "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_heartbeat_delete_survives_a_restart_and_restore_wakes_it(persyn: Persyn) -> None:
    env = {"PERSYN_MODELS__DEFAULT": "test:echo"}
    asleep = persyn.run("heartbeat", "status")
    assert asleep.returncode == 0 and asleep.stdout.startswith("asleep")  # never started yet

    daemon = persyn.start_daemon("run", env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _status(persyn)["heartbeat"] is None:
            time.sleep(0.5)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    beat = _status(persyn)["heartbeat"]
    assert isinstance(beat, dict) and beat["kind"] == "heartbeat"  # bootstrapped by the daemon

    deleted = persyn.run("heartbeat", "delete")
    assert deleted.returncode == 0 and "sleeps until spoken to" in deleted.stdout
    assert "already asleep" in persyn.run("heartbeat", "delete").stdout
    daemon = persyn.start_daemon("run", env=env)
    try:
        time.sleep(3)  # a restart bootstraps nothing: the deletion is durable
        assert _status(persyn)["heartbeat"] is None
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)

    restored = persyn.run("heartbeat", "restore")
    assert restored.returncode == 0 and "beats again" in restored.stdout
    assert persyn.run("heartbeat", "status").stdout.startswith("beating: next at ")
    assert "No reminders" in persyn.run("reminders", "list").stdout
    assert "No goals" in persyn.run("goals", "list").stdout
    helped = " ".join(persyn.run("heartbeat", "delete", "--help").stdout.replace("│", " ").split())
    assert "Put the agent to sleep" in helped


def test_on_a_moved_clock_the_heartbeat_beats_and_a_deleted_one_costs_nothing(persyn: Persyn) -> None:
    env = {"PERSYN_MODELS__DEFAULT": "test:echo", "PERSYN_AUTONOMY__TICK_SECONDS": "1"}
    start = datetime.now(UTC)

    def serve_at(when: datetime, seconds: float, until: Any = None) -> None:
        daemon = persyn.start_daemon("--now", when.isoformat(), "run", env=env)
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not (until and until()):
                time.sleep(0.5)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)

    serve_at(start, 3)  # bootstraps the heartbeat: first beat an hour from now

    def beat_logged() -> bool:
        runs = json.loads(persyn.run("activity", "--json").stdout)
        return any(r["kind"] == "heartbeat" for r in runs)

    serve_at(start + timedelta(hours=1, minutes=1), 30, beat_logged)
    assert beat_logged(), persyn.run("activity").stdout
    assert "heartbeat" in persyn.run("activity").stdout
    reflected = json.loads(persyn.run("usage", "--by", "stage", "--json").stdout)
    assert any(row["key"].startswith("heartbeat") for row in reflected["rows"]), reflected

    assert persyn.run("heartbeat", "delete").returncode == 0
    before = json.loads(persyn.run("usage", "--json").stdout)["total"]
    serve_at(start + timedelta(days=8), 6)  # a week later, restarted: asleep, no model calls
    after = json.loads(persyn.run("usage", "--json").stdout)["total"]
    assert after == before
    assert persyn.run("heartbeat", "status").stdout.startswith("asleep")
    answered = persyn.run(
        "--now", (start + timedelta(days=8)).isoformat(), "chat", "--as", "Sam", input="Hello?\n", env=env
    )
    assert answered.returncode == 0 and "Hello?" in answered.stdout  # still answers when spoken to
