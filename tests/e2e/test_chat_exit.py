"""A piped `persyn chat` exits cleanly, and what it left unfinished is done by the next
process (issue 15 item 4b; `runtime/durable/_shutdown.py`)."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


@pytest.mark.slow
@pytest.mark.timeout(900)  # twenty whole chats, each a process start: minutes on a loaded machine
def test_a_piped_chat_exits_with_code_0_and_nothing_on_stderr_every_time(persyn: Persyn) -> None:
    for run in range(20):
        done = persyn.run("chat", input="hi\n")
        assert (run, done.returncode, done.stderr) == (run, 0, "")
        assert "Ada: You said: hi" in done.stdout


def _rules(path: Path, *, critique_sleep_ms: int) -> None:
    rules = [
        {"task": "respond", "reply": "Yes, I remember our trip to Lisbon last spring very clearly."},
        {
            "task": "critique",
            "sleep_ms": critique_sleep_ms,
            "output": {
                "objections": [
                    {
                        "kind": "confabulation",
                        "span": "I remember our trip to Lisbon",
                        "explanation": "no memory of a trip to Lisbon was recalled",
                    }
                ]
            },
        },
        {"task": "refine", "reply": "I have no memory of a trip to Lisbon."},
        {"task": "decide", "output": {"action": "speak", "reason": "it answers"}},
    ]
    path.write_text(json.dumps({"rules": rules}))


def _critiques(home: Path) -> list[object]:
    """The critiques the deferred deliberation recorded (the turn records an empty list)."""
    with sqlite3.connect(home / "data" / "persyn.db") as db:
        rows = db.execute("SELECT trace FROM deliberation_traces").fetchall()
    return [critique for (trace,) in rows for critique in json.loads(trace).get("critiques", [])]


def _critique_records(home: Path) -> int:
    path = home / "usage.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(json.loads(line)["stage"].startswith("critique:") for line in lines)


def test_background_work_left_unfinished_at_exit_is_done_by_the_next_process(
    persyn: Persyn, tmp_path: Path
) -> None:
    script = tmp_path / "mind.json"
    _rules(script, critique_sleep_ms=120_000)  # still critiquing when the chat leaves
    env = {"PERSYN_MODELS__DEFAULT": f"test:script@{script}"}
    done = persyn.run("chat", input="Remember our trip to Lisbon?\n", env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert "Ada: Yes, I remember our trip to Lisbon" in done.stdout
    assert _critiques(persyn.home) == []
    assert _critique_records(persyn.home) == 0

    _rules(script, critique_sleep_ms=0)  # the script is re-read when it changes
    daemon = persyn.start_daemon(env=env)
    try:
        deadline = time.monotonic() + 60
        while not _critiques(persyn.home) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert _critiques(persyn.home), persyn.log("run")
    assert _critique_records(persyn.home) >= 1
