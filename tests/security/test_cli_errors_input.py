"""Tracebacks instead of errors (issue 13, item 14): each is now one clean line naming the
problem, a non-zero exit, and nothing stored by the command that failed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from persyn_cli import Persyn
from tmpfs import fill, small_disk_at

pytestmark = pytest.mark.e2e


def _clean_error(done: subprocess.CompletedProcess[str], *names: str) -> str:
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    for name in names:
        assert name in errors[0], done.stderr
    return errors[0]


def _queued(persyn: Persyn) -> int:
    """Events stored for the agent (the store's events table), read with the stdlib."""
    import sqlite3

    path = persyn.home / "data" / "persyn.db"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as connection:
        return int(connection.execute("SELECT count(*) FROM events").fetchone()[0])


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_send_with_a_bad_timeout_is_refused_before_anything_is_queued(persyn: Persyn, timeout: str) -> None:
    before = _queued(persyn)
    done = persyn.run("send", "--timeout", timeout, "hello")
    _clean_error(done, "--timeout", timeout)
    assert _queued(persyn) == before


def test_send_with_no_worker_says_the_event_stays_queued(persyn: Persyn) -> None:
    done = persyn.run("send", "--timeout", "0.5", "hello")  # no worker runs: nothing answers
    line = _clean_error(done, "no worker is running", "stays queued")
    assert done.returncode == 3
    assert _queued(persyn) == 1, line


@pytest.mark.parametrize("when", ["0001-01-01", "1969-12-31T23:59", "9999-12-31"])
def test_now_outside_the_years_ids_can_carry(persyn: Persyn, when: str) -> None:
    done = persyn.run("--now", when, "send", "--no-wait", "hello")
    _clean_error(done, "--now", repr(when))
    assert _queued(persyn) == 0


@pytest.mark.parametrize("since", ["99999999d", "999999999999w"])
def test_activity_since_an_impossibly_long_span(persyn: Persyn, since: str) -> None:
    done = persyn.run("activity", "--since", since)
    _clean_error(done, "--since", repr(since))


# The machine refusing: read-only and full filesystems, mounted for the test (root only).
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk_at(tmp_path, "8m") as where:
        yield where


def test_init_on_a_read_only_home(small_disk: Path) -> None:
    persyn = Persyn(home=small_disk / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    assert persyn.run("init", "--name", "Ada").returncode == 0
    config = (persyn.home / "persyn.toml").read_bytes()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    added = persyn.run("init", "--name", "Bob")
    _clean_error(added, repr(str(persyn.home / "persyn.toml")), "Read-only file system")
    elsewhere = persyn.run("init", "--name", "Eve", "--home", str(small_disk / "new-home"))
    _clean_error(elsewhere, repr(str(small_disk / "new-home")), "Read-only file system")
    assert (persyn.home / "persyn.toml").read_bytes() == config


def test_init_on_a_full_disk_keeps_the_existing_file(small_disk: Path) -> None:
    persyn = Persyn(home=small_disk / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    assert persyn.run("init", "--name", "Ada").returncode == 0
    config = (persyn.home / "persyn.toml").read_bytes()
    fill(small_disk)
    done = persyn.run("init", "--name", "Bob")
    _clean_error(done, repr(str(persyn.home / "persyn.toml")), "No space left")
    assert (persyn.home / "persyn.toml").read_bytes() == config


def test_chat_on_a_full_disk(small_disk: Path) -> None:
    persyn = Persyn(home=small_disk / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    assert persyn.run("init", "--name", "Ada").returncode == 0
    first = persyn.run("chat", input="hello\n")
    assert first.returncode == 0 and "You said: hello" in first.stdout, first.stderr
    fill(small_disk)
    done = persyn.run("chat", input="are you there?\n")
    _clean_error(done, "full")
    assert "sqlalche.me" not in done.stderr and "[SQL:" not in done.stderr


def test_chat_when_the_disk_fills_during_the_session(small_disk: Path) -> None:
    persyn = Persyn(home=small_disk / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    assert persyn.run("init", "--name", "Ada").returncode == 0
    chat = subprocess.Popen(
        [sys.executable, "-m", "persyn", "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=persyn.environ(PERSYN_DELIBERATION__ENABLED="false"),
    )
    assert chat.stdin is not None and chat.stdout is not None
    with chat:  # a failure below must not leave the chat running into the next test
        chat.stdin.write(b"first\n")
        chat.stdin.flush()
        for line in iter(chat.stdout.readline, b""):  # the first reply: the store works
            if b"You said: first" in line:
                break
        fill(small_disk)
        try:
            out, err = chat.communicate(b"second, with nowhere to put it\n", timeout=120)
        finally:
            if chat.poll() is None:
                chat.kill()
    done = subprocess.CompletedProcess(chat.args, chat.returncode, out.decode(), err.decode())
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stdout.splitlines() if "error:" in line]
    assert len(errors) == 1 and "disk is full" in errors[0], done.stdout
    assert "sqlalche.me" not in done.stdout and "[SQL:" not in done.stdout


def test_garbage_workflow_database_is_a_clean_error_and_doctor_says_how_to_fix_it(persyn: Persyn) -> None:
    data = persyn.home / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "dbos.sqlite").write_bytes(b"this is not a database\n" * 200)
    healthy_store = persyn.run("memory", "stats")
    assert healthy_store.returncode == 0, healthy_store.stderr
    for command in (("send", "--no-wait", "hello"), ("chat",)):
        done = persyn.run(*command, input="hello\n")
        _clean_error(done, repr(str(data / "dbos.sqlite")), "not a database", "move it aside")
    assert _queued(persyn) == 0
    doctor = persyn.run("doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert f"[FAIL] workflow database: {data / 'dbos.sqlite'}: file is not a database" in doctor.stdout
    assert f"fix: move it aside (mv {data / 'dbos.sqlite'} " in doctor.stdout
    assert "All checks passed" not in doctor.stdout


def test_garbage_store_is_a_clean_error_and_doctor_says_how_to_fix_it(persyn: Persyn) -> None:
    data = persyn.home / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "persyn.db").write_bytes(b"garbage" * 1000)
    done = persyn.run("send", "--no-wait", "hello")
    _clean_error(done, repr(str(data / "persyn.db")), "not a database")
    doctor = persyn.run("doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert f"[FAIL] database: {data / 'persyn.db'}: file is not a database" in doctor.stdout
    assert "fix: restore it from a backup" in doctor.stdout
    assert (data / "persyn.db").read_bytes() == b"garbage" * 1000
