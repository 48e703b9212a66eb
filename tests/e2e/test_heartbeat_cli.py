"""The heartbeat switches through the real CLI (issue 6): a started agent has one; deleting it
is durable across a daemon restart; restoring wakes it; reminders and goals list cleanly."""

from __future__ import annotations

import json
import time

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
