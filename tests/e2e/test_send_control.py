"""`persyn send` through a running worker's control socket (issue 15 item 8: the round trip
without DBOS), and what a killed worker's socket or a hostile request does to it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.runtime.durable.control_client import control_path, short_address

pytestmark = pytest.mark.e2e

NO_WORKER_EXIT = 3

# In a fresh interpreter: `persyn send` as the console script runs it, then which of the
# libraries the queue path needs it imported.
_PROBE = """
import json, sys
from persyn.cli import main
sys.argv = ["persyn", *json.loads(sys.argv[1])]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = ("dbos", "sqlalchemy", "pydantic_ai", "numpy", "wordllama", "llama_cpp")
print(json.dumps({"code": code, "imported": [m for m in heavy if m in sys.modules]}))
"""


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def _agent_replies(home: Path, event_id: str) -> list[str]:
    with sqlite3.connect(home / "data" / "persyn.db") as db:
        rows = db.execute("SELECT text FROM messages WHERE role = 'agent' AND event_id = ?", (event_id,))
        return [str(row[0]) for row in rows.fetchall()]


def _events(home: Path) -> int:
    with sqlite3.connect(home / "data" / "persyn.db") as db:
        return int(db.execute("SELECT count(*) FROM events").fetchone()[0])


def _exchange(path: Path, payload: bytes) -> list[dict[str, object]]:
    """Write `payload` to the control socket raw; the JSON lines it answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(30)
        with short_address(path) as address:
            client.connect(address)
        # It may answer and close while the rest is still being written.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            client.sendall(payload)
        answer = b""
        while True:
            try:
                chunk = client.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
    return [json.loads(line) for line in answer.splitlines()]


def test_send_to_a_running_worker_goes_over_its_socket_without_dbos(persyn: Persyn) -> None:
    daemon = persyn.start_daemon("run")
    try:
        path = control_path(persyn.home / "data")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # only the owner may connect
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, json.dumps(["send", "hello over the socket"])],
            capture_output=True,
            text=True,
            timeout=120,
            env=persyn.environ(),
            check=False,
        )
        *printed, last = probe.stdout.splitlines()
        assert printed == ["You said: hello over the socket"], (probe.stdout, probe.stderr)
        assert json.loads(last) == {"code": 0, "imported": []}, probe.stderr

        # The same errors as the queue path, and nothing stored for them.
        before = _events(persyn.home)
        empty = persyn.run("send", "   ")
        unknown = persyn.run("send", "--agent", "Bob", "hi")
        long = persyn.run("send", "x" * 40_000)  # the limit is 32,000
        bad_timeout = persyn.run("send", "--timeout", "-1", "hi")
        assert [empty.returncode, unknown.returncode, long.returncode, bad_timeout.returncode] == [2] * 4
        assert empty.stderr.strip() == "error: message is empty"
        assert "no agent named 'Bob'" in unknown.stderr
        assert "limit is" in long.stderr and "max_message_chars" in long.stderr
        assert "invalid --timeout" in bad_timeout.stderr
        assert _events(persyn.home) == before

        # --no-wait prints the id at once; the worker answers it.
        queued = persyn.run("send", "--no-wait", "later please")
        assert queued.returncode == 0, queued.stderr
        event_id = queued.stdout.strip()
        deadline = time.monotonic() + 60
        while not _agent_replies(persyn.home, event_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _agent_replies(persyn.home, event_id) == ["You said: later please"]
    finally:
        _stop(daemon)
    assert not control_path(persyn.home / "data").exists()  # a stopped worker removes it


def test_a_killed_workers_socket_falls_back_to_the_queue(persyn: Persyn) -> None:
    daemon = persyn.start_daemon("run")
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=60)
    path = control_path(persyn.home / "data")
    assert path.exists()  # kill -9 leaves it behind: nothing listens on it

    done = persyn.run("send", "anyone left?", timeout=60)
    assert done.returncode == NO_WORKER_EXIT, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: no worker is running")
    assert "Traceback" not in done.stderr

    # The next worker takes the socket over and answers at once (the queued message too).
    daemon = persyn.start_daemon("run")
    try:
        again = persyn.run("send", "and now?")
    finally:
        _stop(daemon)
    assert (again.returncode, again.stdout.strip(), again.stderr) == (0, "You said: and now?", "")


def test_garbage_on_the_socket_gets_an_error_and_the_worker_serves_on(persyn: Persyn) -> None:
    daemon = persyn.start_daemon("run")
    try:
        path = control_path(persyn.home / "data")
        before = _events(persyn.home)
        answers = {
            "not json": _exchange(path, b"hello there\n"),
            "not an object": _exchange(path, b"[1, 2, 3]\n"),
            "unknown op": _exchange(path, b'{"op": "shutdown"}\n'),
            "no event": _exchange(path, b'{"op": "send", "wait": true, "timeout": 5}\n'),
            "wrong types": _exchange(
                path,
                json.dumps({"op": "send", "event": {"id": 1}, "wait": True, "timeout": 5}).encode() + b"\n",
            ),
            "10 MB, no newline": _exchange(path, b"x" * (10 * 1024 * 1024)),
            "binary": _exchange(path, os.urandom(4096) + b"\n"),
        }
        for name, answer in answers.items():
            assert len(answer) == 1, (name, answer)
            assert answer[0]["error"] == "request", (name, answer)
            assert isinstance(answer[0]["message"], str) and answer[0]["message"], (name, answer)
        assert "longer than" in str(answers["10 MB, no newline"][0]["message"])

        # A well-formed request for a bad event: the intake's own errors, nothing stored.
        event = {
            "id": "not-an-id",
            "agent_id": "x",
            "channel": "cli",
            "speaker_id": "mallory",
            "display_name": "Mallory",
            "text": "hi",
            "received_at": "2026-01-01T00:00:00+00:00",
        }
        request = {"op": "send", "event": event, "wait": False, "timeout": 5}
        (bad_id,) = _exchange(path, json.dumps(request).encode() + b"\n")
        assert bad_id["error"] == "input" and "event id" in str(bad_id["message"]), bad_id
        # A connection that closes before a whole line.
        _exchange(path, b'{"op": "se')
        assert _events(persyn.home) == before

        done = persyn.run("send", "still there?")
    finally:
        _stop(daemon)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "You said: still there?", "")


def test_a_sender_that_leaves_mid_wait_leaves_its_message_answered(persyn: Persyn, tmp_path: Path) -> None:
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"task": "respond", "reply": "Sorry, I was thinking.", "sleep_ms": 10000}]))
    env = {"PERSYN_MODELS__DEFAULT": f"test:script@{script}"}
    daemon = persyn.start_daemon("run", env=env)
    try:
        before = _events(persyn.home)
        sender = subprocess.Popen(
            [sys.executable, "-m", "persyn", "send", "think about it"],
            env=persyn.environ(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while _events(persyn.home) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        sender.send_signal(signal.SIGINT)  # Ctrl-C while the worker still thinks
        assert sender.wait(timeout=60) == 130
        with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
            (event_id,) = db.execute("SELECT id FROM events ORDER BY id DESC LIMIT 1").fetchone()
        deadline = time.monotonic() + 60
        while not _agent_replies(persyn.home, event_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _agent_replies(persyn.home, event_id) == ["Sorry, I was thinking."]
        again = persyn.run("send", "and now?", env=env)
    finally:
        _stop(daemon)
    assert (again.returncode, again.stdout.strip(), again.stderr) == (0, "Sorry, I was thinking.", "")
