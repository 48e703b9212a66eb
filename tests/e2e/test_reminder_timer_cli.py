"""The reminder timer across processes (issue 33, item 15): a daemon armed for a reminder is
killed with -9 before it comes due; the next daemon, started after its time, fires it once.
The DBOS safety tick is off (`tick_seconds = 0`), so only the timer can fire it.

Real `persyn` subprocesses on one deployment: `persyn chat` (a scripted model sets the
reminder), then two daemons on clocks moved before and after its time."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REMINDED = "Time to water the plants, as you asked!"
PATIENCE = 120.0  # a bound for each wait on a busy machine, not an expectation


def _script(path: Path) -> str:
    rules = [
        {
            "task": "respond",
            "match": "remind me",
            "times": 1,
            "tool_calls": [
                {"name": "set_reminder", "args": {"objective": "water the plants", "in_minutes": 60}}
            ],
        },
        {"task": "respond", "match": "remind me", "reply": "I will remind you."},
        {"task": "respond", "match": "has come due", "reply": REMINDED},
    ]
    path.write_text(json.dumps(rules))
    return f"test:script@{path}"


def _reminder_runs(persyn: Persyn) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(persyn.run("activity", "--json").stdout)
    return [run for run in runs if run["kind"] == "reminder"]


def test_a_daemon_killed_while_armed_leaves_the_reminder_to_the_next_one(
    persyn: Persyn, tmp_path: Path
) -> None:
    env = {
        "PERSYN_MODELS__DEFAULT": _script(tmp_path / "rules.json"),
        "PERSYN_AUTONOMY__TICK_SECONDS": "0",
        "PERSYN_AUTONOMY__WATCH_SECONDS": "1",
        "PERSYN_AUTONOMY__HEARTBEAT_MINUTES": "1440",
        "PERSYN_LOG_LEVEL": "info",  # the timer says when it arms
    }
    start = datetime.now(UTC)
    asked = persyn.run(
        "--now",
        start.isoformat(),
        "chat",
        "--as",
        "Sam",
        input="Please remind me to water the plants\n",
        env=env,
    )
    assert asked.returncode == 0, asked.stderr
    assert "water the plants" in persyn.run("reminders", "list").stdout

    # Half an hour before it is due: the daemon arms for it, and is killed.
    armed = persyn.start_daemon("--now", (start + timedelta(minutes=30)).isoformat(), "run", env=env)
    try:
        deadline = time.monotonic() + PATIENCE
        while "reminder timer armed for" not in persyn.log("--now") and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        armed.kill()  # -9: nothing of the daemon survives but what it wrote
        armed.wait(timeout=30)
    assert "reminder timer armed for" in persyn.log("--now"), persyn.log("--now")
    assert _reminder_runs(persyn) == []

    # An hour after it was due: the next daemon fires it at once, once.
    later = persyn.start_daemon("--now", (start + timedelta(hours=2)).isoformat(), "run", env=env)
    try:
        deadline = time.monotonic() + PATIENCE
        while not _reminder_runs(persyn) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        later.terminate()
        later.wait(timeout=30)
    (run,) = _reminder_runs(persyn)
    assert run["outcome"] == f"said: {REMINDED}", run
    listed = persyn.run("reminders", "list").stdout
    assert "water the plants" not in listed, listed  # one-shot: gone once fired
