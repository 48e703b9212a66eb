"""A real IRC server (Debian's ngircd) on loopback, started once per test session, and a raw
IRC peer written against the protocol alone (not the adapter's code) to stand in for people."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import needs

NGIRCD = shutil.which("ngircd") or "/usr/sbin/ngircd"
WAIT_SECONDS = 60.0  # bounds a broken test only


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class IrcServer:
    """One ngircd process on 127.0.0.1:`port`; `restart` kills it and starts it again."""

    directory: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None
    password: str | None = None  # the server's connection password (PASS), if any

    def start(self) -> None:
        conf = self.directory / "ngircd.conf"
        conf.write_text(
            "[Global]\nName = irc.test.local\nInfo = persyn tests\nListen = 127.0.0.1\n"
            f"Ports = {self.port}\nMotdPhrase = tests\n"
            + (f"Password = {self.password}\n" if self.password else "")
            + "[Limits]\nMaxNickLength = 30\nMaxConnectionsIP = 0\nPingTimeout = 120\nPongTimeout = 20\n"
            "[Options]\nPAM = no\nIdent = no\nDNS = no\n"
        )
        self.process = subprocess.Popen(
            [NGIRCD, "-n", "-f", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("ngircd did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()  # a crash, not a goodbye: clients see the connection drop
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass(frozen=True)
class Heard:
    nick: str
    command: str
    target: str
    text: str


class IrcPeer:
    """A person on IRC: registers a nick, joins rooms, says things, keeps what it hears."""

    def __init__(self, nick: str) -> None:
        self.nick = nick
        self.heard: list[Heard] = []
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._welcome = asyncio.Event()

    async def connect(self, port: int, password: str | None = None) -> IrcPeer:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", port)
        self._task = asyncio.ensure_future(self._read())
        if password is not None:
            await self.send(f"PASS {password}")
        await self.send(f"NICK {self.nick}")
        await self.send(f"USER {self.nick} 0 * :{self.nick}")
        await asyncio.wait_for(self._welcome.wait(), WAIT_SECONDS)
        return self

    async def _read(self) -> None:
        assert self._reader is not None
        while raw := await self._reader.readline():
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            prefix = ""
            if line.startswith(":"):
                prefix, _, line = line[1:].partition(" ")
            head, _, trailing = line.partition(" :")
            words = head.split()
            if not words:
                continue
            if words[0] == "PING":
                await self.send(f"PONG :{trailing}")
            elif words[0] == "001":
                self._welcome.set()
            target = words[1] if len(words) > 1 else ""
            self.heard.append(Heard(prefix.split("!")[0], words[0], target, trailing))

    async def send(self, line: str) -> None:
        assert self._writer is not None
        self._writer.write(line.encode() + b"\r\n")
        await self._writer.drain()

    async def send_bytes(self, line: bytes) -> None:
        """A line as raw bytes, UTF-8 or not (some clients send Latin-1)."""
        assert self._writer is not None
        self._writer.write(line + b"\r\n")
        await self._writer.drain()

    async def join(self, room: str) -> None:
        await self.send(f"JOIN {room}")
        await self.wait_for(lambda h: h.command == "JOIN" and h.nick == self.nick, f"{self.nick} in {room}")

    async def say(self, target: str, text: str) -> None:
        await self.send(f"PRIVMSG {target} :{text}")

    def said_by(self, nick: str, target: str | None = None) -> list[str]:
        return [
            h.text
            for h in self.heard
            if h.command == "PRIVMSG"
            and h.nick.lower() == nick.lower()
            and (target is None or h.target == target)
        ]

    async def wait_for(self, condition: Callable[[Heard], bool], what: str) -> Heard:
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while True:
            for heard in self.heard:
                if condition(heard):
                    return heard
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{self.nick} never saw {what}; heard {self.heard[-10:]}")
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()


def running_ircd(directory: Path) -> Iterator[IrcServer]:
    """An ngircd for a fixture to yield (skipped through `needs` where it is not installed)."""
    if not Path(NGIRCD).exists():
        needs.missing("ngircd (a real IRC server)")
    directory.mkdir(parents=True, exist_ok=True)
    server = IrcServer(directory)
    server.start()
    yield server
    server.stop()
