"""`persyn run` with `[channels.irc]` configured: the real command connects the agent to a
real ngircd, answers a private message there, and leaves on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from irc_server import IrcPeer, IrcServer

pytestmark = pytest.mark.e2e


def _persyn(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "persyn", "--home", str(home), *args]


def _environ() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
    base.pop("ANTHROPIC_API_KEY", None)
    base.pop("OPENAI_API_KEY", None)
    return {**base, "PERSYN_MODELS__DEFAULT": "test:echo"}


def _start_run(home: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`persyn init`, the IRC keys set in the starter file, then `persyn run` in the background."""
    done = subprocess.run(
        _persyn(home, "init", "--name", "Ada"), env=_environ(), capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    # The starter file has every section's header, its keys commented out: set them there.
    config = home / "persyn.toml"
    irc = f'server = "127.0.0.1"\nport = {port}\ntls = false\nchannels = ["#run"]\n'
    pacing = "[pacing.channels.irc]\nlisten_seconds = 0.2\nmin_interval_seconds = 0.0\njitter_seconds = 0.1\n"
    text = config.read_text()
    assert "\n[channels.irc]\n" in text
    text = text.replace("\n[channels.irc]\n", f"\n[channels.irc]\n{irc}", 1)
    # A short lease: renewed (and its connection state recorded) every second.
    assert "\n[dispatch]\n" in text
    text = text.replace("\n[dispatch]\n", "\n[dispatch]\nchannel_lease_seconds = 3.0\n", 1)
    config.write_text(text + "\n" + pacing)
    with log.open("wb") as out:
        return subprocess.Popen(
            _persyn(home, "run"),
            env=_environ(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _stop(daemon: subprocess.Popen[bytes]) -> int:
    daemon.send_signal(signal.SIGTERM)
    return daemon.wait(timeout=60)


async def test_persyn_run_serves_irc(tmp_path: Path, ircd: IrcServer) -> None:
    log = tmp_path / "run.log"
    daemon = _start_run(tmp_path / "home", ircd.port, log)
    sam = await IrcPeer("sam").connect(ircd.port)
    try:
        if daemon.poll() is not None:
            raise AssertionError(log.read_text(errors="replace"))
        await sam.join("#run")
        await sam.wait_for(lambda h: h.command == "JOIN" and h.nick == "Ada", "Ada joining #run")
        await sam.say("Ada", "hello from IRC")
        reply = await sam.wait_for(lambda h: h.nick == "Ada" and h.command == "PRIVMSG", "Ada's answer")
        assert (reply.target, reply.text) == ("sam", "You said: hello from IRC")
        # Another process sees who connects IRC and how the connection stands.
        home = tmp_path / "home"
        listed = await asyncio.to_thread(
            subprocess.run,
            _persyn(home, "channels", "list", "--json"),
            env=_environ(),
            capture_output=True,
            text=True,
        )
        (room,) = [name for name in json.loads(listed.stdout) if name.startswith("irc:")]
        deadline = time.monotonic() + 60
        shown = ""
        while "Ada: connected since" not in shown and time.monotonic() < deadline:
            shown = (
                await asyncio.to_thread(
                    subprocess.run,
                    _persyn(home, "channels", "show", room),
                    env=_environ(),
                    capture_output=True,
                    text=True,
                )
            ).stdout
        connection = [line for line in shown.splitlines() if line.startswith("  connection: ")]
        assert len(connection) == 1 and "Ada: connected since" in connection[0], shown
        assert f":{daemon.pid}:" in connection[0]  # the holder: this host, the daemon's pid
    finally:
        await sam.close()
        code = _stop(daemon)
    output = log.read_text(errors="replace")
    assert code == 0, output
    assert "Traceback" not in output
