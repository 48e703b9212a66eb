"""`persyn send` when no worker runs, and when a worker's turn is slow (issue 15 item 4a)."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e

NO_WORKER_EXIT = 3


def _agent_replies(home: Path, event_id: str) -> list[str]:
    with sqlite3.connect(home / "data" / "persyn.db") as db:
        rows = db.execute("SELECT text FROM messages WHERE role = 'agent' AND event_id = ?", (event_id,))
        return [str(row[0]) for row in rows.fetchall()]


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def _slow_model(path: Path, sleep_ms: int) -> dict[str, str]:
    path.write_text(
        json.dumps([{"task": "respond", "reply": "Sorry, I was thinking.", "sleep_ms": sleep_ms}])
    )
    return {"PERSYN_MODELS__DEFAULT": f"test:script@{path}"}


def test_with_no_worker_send_says_so_at_once_and_a_worker_started_later_answers(persyn: Persyn) -> None:
    # Without the check this waited out its 300 s default and ended in a traceback.
    done = persyn.run("send", "hello, anyone?", timeout=60)
    assert done.returncode == NO_WORKER_EXIT, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: no worker is running")
    assert "`persyn run`" in line and "stays queued" in line and "when a worker starts" in line
    found = re.search(r"\b([0-9A-HJKMNP-TV-Z]{26})\b", line)
    assert found is not None, line
    event_id = found.group(1)
    assert _agent_replies(persyn.home, event_id) == []

    daemon = persyn.start_daemon("run")
    try:
        deadline = time.monotonic() + 60
        while not _agent_replies(persyn.home, event_id) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        _stop(daemon)
    assert _agent_replies(persyn.home, event_id) == ["You said: hello, anyone?"]


def test_a_slow_turn_of_a_running_worker_is_waited_for(persyn: Persyn, tmp_path: Path) -> None:
    env = _slow_model(tmp_path / "slow.json", sleep_ms=2500)  # longer than a look at the workers
    daemon = persyn.start_daemon("worker", env=env)
    try:
        done = persyn.run("send", "are you there?", env=env)
        assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "Sorry, I was thinking.", "")
        # A reply that does not come in time is still the timeout, not "no worker".
        late = persyn.run("send", "--timeout", "0.5", "and now?", env=env)
    finally:
        _stop(daemon)
    assert late.returncode == 1, late.stderr
    assert "within 0.5s" in late.stderr and "stays queued" in late.stderr
