"""The outbox end to end (issue 14): a reminder the daemon fires for the operator reaches
them when they next open `persyn chat`, once, marked as having arrived while they were
away — even though the daemon that wrote it was killed (-9) before anyone could deliver it."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REMINDED = "Time to water the plants, as you asked!"


def _script(path: Path) -> str:
    rules = [
        {  # the operator asks: the agent sets the reminder (once), then says so
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


def test_a_reminder_fired_by_the_daemon_reaches_the_next_chat_once(persyn: Persyn, tmp_path: Path) -> None:
    env = {
        "PERSYN_MODELS__DEFAULT": _script(tmp_path / "rules.json"),
        "PERSYN_AUTONOMY__TICK_SECONDS": "1",
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
    assert "I will remind you." in asked.stdout
    listed = persyn.run("reminders", "list")
    assert "water the plants" in listed.stdout, listed.stdout

    later = start + timedelta(hours=2)

    def fired() -> bool:
        runs = json.loads(persyn.run("activity", "--json").stdout)
        return any(r["kind"] == "reminder" and r["outcome"].startswith("said:") for r in runs)

    daemon = persyn.start_daemon("--now", later.isoformat(), "run", env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not fired():
            time.sleep(0.5)
    finally:
        daemon.kill()  # -9: nothing of the daemon's survives but what it wrote
        daemon.wait(timeout=30)
    assert fired(), persyn.run("activity").stdout + persyn.log("run")

    opened = persyn.run("--now", later.isoformat(), "chat", "--as", "Sam", input="", env=env)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.count(REMINDED) == 1, opened.stdout
    assert "while you were away" in opened.stdout
    assert opened.stdout.index("while you were away") < opened.stdout.index(REMINDED)

    again = persyn.run("--now", later.isoformat(), "chat", "--as", "Sam", input="", env=env)
    assert again.returncode == 0, again.stderr
    assert REMINDED not in again.stdout and "while you were away" not in again.stdout


def test_a_chat_with_another_agent_leaves_the_first_agents_messages_waiting(
    persyn: Persyn, tmp_path: Path
) -> None:
    env = {
        "PERSYN_MODELS__DEFAULT": _script(tmp_path / "rules.json"),
        "PERSYN_AUTONOMY__TICK_SECONDS": "1",
    }
    assert persyn.run("init", "--name", "Bo").returncode == 0
    start = datetime.now(UTC)
    asked = persyn.run(
        "--now",
        start.isoformat(),
        "chat",
        "--agent",
        "Ada",
        "--as",
        "Sam",
        input="Please remind me to water the plants\n",
        env=env,
    )
    assert asked.returncode == 0, asked.stderr
    later = start + timedelta(hours=2)

    def fired() -> bool:
        runs = json.loads(persyn.run("activity", "--agent", "Ada", "--json").stdout)
        return any(r["kind"] == "reminder" and r["outcome"].startswith("said:") for r in runs)

    daemon = persyn.start_daemon("--now", later.isoformat(), "run", env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not fired():
            time.sleep(0.5)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert fired(), persyn.log("run")

    other = persyn.run("--now", later.isoformat(), "chat", "--agent", "Bo", "--as", "Sam", input="", env=env)
    assert other.returncode == 0, other.stderr
    assert REMINDED not in other.stdout
    mine = persyn.run("--now", later.isoformat(), "chat", "--agent", "Ada", "--as", "Sam", input="", env=env)
    assert mine.stdout.count(REMINDED) == 1, mine.stdout
