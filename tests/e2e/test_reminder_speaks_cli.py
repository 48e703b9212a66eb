"""A reminder says what it was set to say (issue 33, item 10; SPEC §9 "send you a message
you didn't prompt"). Its objective is the agent's own intent, so a reply that restates it
("Tell Sam the report is due Friday" -> "Sam, the report is due Friday.") is the point of
the run, not something "already said" in the channel: the redundancy gate once counted the
reminder's own input as another speaker, and with the echo model every reminder was silenced.

Real `persyn` subprocesses on one deployment: the operator asks in `persyn chat` (a scripted
model sets the reminder), a daemon on a clock moved past the reminder fires it with
`test:echo`, and the operator's next chat shows what it said.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OBJECTIVE = "Tell Sam the report is due Friday"


def _script(path: Path) -> str:
    rules = [
        {
            "task": "respond",
            "match": "remind me",
            "times": 1,
            "tool_calls": [{"name": "set_reminder", "args": {"objective": OBJECTIVE, "in_minutes": 60}}],
        },
        {"task": "respond", "match": "remind me", "reply": "I will tell you then."},
    ]
    path.write_text(json.dumps(rules))
    return f"test:script@{path}"


def _reminder_runs(persyn: Persyn) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(persyn.run("activity", "--json").stdout)
    return [run for run in runs if run["kind"] == "reminder"]


def test_a_reminder_that_restates_its_objective_reaches_the_channel(persyn: Persyn, tmp_path: Path) -> None:
    start = datetime.now(UTC)
    asked = persyn.run(
        "--now",
        start.isoformat(),
        "chat",
        "--as",
        "Sam",
        input="Please remind me about the report\n",
        env={"PERSYN_MODELS__DEFAULT": _script(tmp_path / "rules.json")},
    )
    assert asked.returncode == 0, asked.stderr
    assert OBJECTIVE in persyn.run("reminders", "list").stdout

    later = (start + timedelta(hours=2)).isoformat()
    echo = {"PERSYN_MODELS__DEFAULT": "test:echo", "PERSYN_AUTONOMY__TICK_SECONDS": "1"}
    daemon = persyn.start_daemon("--now", later, "run", env=echo)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _reminder_runs(persyn):
            time.sleep(0.5)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    (run,) = _reminder_runs(persyn)
    # The echo model restates the objective; it is said, not silenced as redundant.
    assert run["outcome"].startswith("said: You said: "), run["outcome"]
    assert OBJECTIVE in run["outcome"] and "already said" not in run["outcome"]

    opened = persyn.run("--now", later, "chat", "--as", "Sam", input="", env=echo)
    assert opened.returncode == 0, opened.stderr
    away = opened.stdout.index("while you were away")
    assert opened.stdout.count(OBJECTIVE) == 1 and opened.stdout.index(OBJECTIVE) > away, opened.stdout
    assert "chose silence" not in opened.stdout
