"""Issue 33 item 3: two `persyn run` on one home both connected to IRC (as `Ada` and `Ada_`),
stored every room line twice and answered each other. A chat network has one owner in a
deployment (a lease in the store, `runtime/delivery/channel_leases.py`): the second process serves
workers only and says so, and takes the connection over when the owner dies.

Real parts: Debian's ngircd on loopback, two real `persyn run` processes (on one SQLite home,
or on two "hosts" — homes of their own with the same agents — sharing a real PostgreSQL), a
raw IRC client standing in for a person, kill -9 for the owner's death. The lease is short
(`[dispatch] channel_lease_seconds`) so the takeover comes quickly; the test waits on what
it expects to see, bounded only against a broken build."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "channels"))

from irc_server import Heard, IrcPeer, IrcServer, running_ircd
from persyn_cli import Persyn, stop_gracefully

from persyn.testing.postgres import PostgresForTests

WAIT_SECONDS = 300.0  # bounds a broken build only (a loaded 2-core CI machine takes minutes to start one)
# Up to two daemons and a `persyn doctor` on a machine that may be busy: each wait below is
# bounded by WAIT_SECONDS, and the test as a whole by a few of them.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * WAIT_SECONDS)]

LEASE = {"PERSYN_DISPATCH__CHANNEL_LEASE_SECONDS": "5", "PERSYN_LOG_LEVEL": "info"}


@pytest.fixture
def ircd(tmp_path: Path) -> Iterator[IrcServer]:
    """A server of its own: the test watches which nicks join it."""
    yield from running_ircd(tmp_path / "ngircd")


def _irc_home(persyn: Persyn, port: int) -> None:
    """The starter file with `[channels.irc]` on the test server and quick pacing."""
    config = persyn.home / "persyn.toml"
    irc = f'server = "127.0.0.1"\nport = {port}\ntls = false\nchannels = ["#lease"]\n'
    pacing = "[pacing.channels.irc]\nlisten_seconds = 0.2\nmin_interval_seconds = 0.0\njitter_seconds = 0.1\n"
    text = config.read_text()
    assert "\n[channels.irc]\n" in text
    config.write_text(text.replace("\n[channels.irc]\n", f"\n[channels.irc]\n{irc}", 1) + "\n" + pacing)


def _hosts(persyn: Persyn, backend: str, request: pytest.FixtureRequest) -> tuple[Persyn, Persyn]:
    """Where the two processes run: both on `persyn`'s home (SQLite), or each on a home of its
    own with the same persyn.toml, sharing one PostgreSQL database (two hosts, in effect)."""
    if backend == "sqlite":
        return persyn, persyn
    server: PostgresForTests = request.getfixturevalue("postgres_server")
    url = server.fresh_database("lease")
    # Its own executor id too, as a host of its own would have (`[dispatch] executor_id`).
    other = Persyn(
        home=persyn.home.parent / "host-b" / "home",
        env={**persyn.env, "PERSYN_STORAGE_URL": url, "PERSYN_DISPATCH__EXECUTOR_ID": "run@host-b"},
    )
    other.home.mkdir(parents=True)
    shutil.copy(persyn.home / "persyn.toml", other.home / "persyn.toml")
    return Persyn(home=persyn.home, env={**persyn.env, "PERSYN_STORAGE_URL": url}), other


def _start_run(persyn: Persyn, log: Path) -> subprocess.Popen[bytes]:
    """`persyn run` with its output in `log` (one file per process), once it is serving."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "persyn", "run"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=persyn.environ(**LEASE),
        )
    try:
        _wait_for_log(log, "persyn is serving", process)
    except AssertionError:
        process.kill()
        process.wait()
        raise
    return process


def _wait_for_log(log: Path, pattern: str, process: subprocess.Popen[bytes]) -> re.Match[str]:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found is not None:
            return found
        if process.poll() is not None:
            raise AssertionError(
                f"persyn exited with {process.returncode}:\n{log.read_text(errors='replace')}"
            )
        time.sleep(0.05)
    raise AssertionError(f"{log.name} never said {pattern!r}:\n{log.read_text(errors='replace')}")


async def _heard(peer: IrcPeer, condition: Callable[[Heard], bool], what: str) -> Heard:
    """`peer.wait_for` with this test's bound: a turn on a loaded machine may take minutes."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for heard in peer.heard:
            if condition(heard):
                return heard
        await asyncio.sleep(0.05)
    raise AssertionError(f"{peer.nick} never heard {what}; heard {peer.heard[-10:]}")


def _joins(peer: IrcPeer) -> list[str]:
    return [h.nick for h in peer.heard if h.command == "JOIN" and h.nick.lower().startswith("ada")]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_one_process_owns_irc_and_another_takes_over_when_it_dies(
    persyn: Persyn, ircd: IrcServer, backend: str, request: pytest.FixtureRequest
) -> None:
    _irc_home(persyn, ircd.port)
    host_a, host_b = _hosts(persyn, backend, request)
    sam = await IrcPeer("sam").connect(ircd.port)
    await sam.join("#lease")
    first_log, second_log = persyn.home.parent / "first.log", persyn.home.parent / "second.log"
    first = _start_run(host_a, first_log)
    second: subprocess.Popen[bytes] | None = None
    try:
        await _heard(sam, lambda h: h.command == "JOIN" and h.nick == "Ada", "Ada joining #lease")
        second = _start_run(host_b, second_log)
        # The owner's connection is the only one: the second joined nothing (as `Ada_`), and
        # a message is answered once.
        await sam.say("Ada", "first")
        await _heard(sam, lambda h: h.nick == "Ada" and h.text == "You said: first", "Ada's answer")
        assert _joins(sam) == ["Ada"]
        assert sam.said_by("Ada") == ["You said: first"]
        # The second says it serves workers only, naming the owner (the first, by its pid).
        standby = _wait_for_log(second_log, r"irc: connected by (\S+) .*serves workers only", second)
        assert f":{first.pid}:" in standby.group(1)

        first.kill()  # kill -9: no goodbye, no lease given up
        first.wait()
        await _heard(
            sam, lambda h: h.command in ("QUIT", "PART") and h.nick == "Ada", "the dead owner leaving"
        )
        _wait_for_log(second_log, r"irc: connected by this process", second)
        await _heard(
            sam,
            lambda h: h.command == "JOIN" and h.nick.lower().startswith("ada") and len(_joins(sam)) == 2,
            "the second process joining #lease",
        )
        assert _joins(sam) == ["Ada", "Ada"]  # the same nick, once: the old one is gone
        await sam.say("Ada", "second")
        await _heard(sam, lambda h: h.nick == "Ada" and h.text == "You said: second", "the new answer")
        # Answered once. (The reply to "first" may come a second time: the owner was killed
        # between sending it and recording it sent, and delivery is at least once, §5.)
        assert sam.said_by("Ada").count("You said: second") == 1

        doctor = host_a.run("doctor", timeout=WAIT_SECONDS)
        assert re.search(rf"irc: \S+:{second.pid}:\S+", doctor.stdout), doctor.stdout
    finally:
        await sam.close()
        if first.poll() is None:
            first.kill()
            first.wait()
        if second is not None:
            stop_gracefully(second)
    for log in (first_log, second_log):
        assert "Traceback" not in log.read_text(errors="replace")
