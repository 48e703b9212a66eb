"""The week's group chat, a real IRC room (issue 38): a private ngircd on loopback for the
eval, and a plain IRC client for each person who speaks there, written against the protocol
(RFC 2812) alone. The agent joins the room through its own IRC adapter (`[channels.irc]`),
as it would any network; people address it by name ("Wren: ..."), as people do in a room.

The server runs under the eval's tether (`persyn.evals.tether`), so it ends with the eval.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from persyn.channels.irc.channel import parse_line
from persyn.core.errors import PersynError

__all__ = ["ROOM", "IrcPerson", "IrcRoom"]

ROOM = "#group"
_WAIT = 60.0  # bounds a server or a join that never comes


class GroupChatError(PersynError):
    """The group chat could not be set up (no ngircd, a server that would not start)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ngircd_binary() -> str | None:
    """Where ngircd is installed (Debian puts it in /usr/sbin, off a user's PATH), or None."""
    return shutil.which("ngircd") or next(
        (p for p in ("/usr/sbin/ngircd", "/usr/local/sbin/ngircd") if Path(p).is_file()), None
    )


@dataclass
class IrcRoom:
    """One ngircd on 127.0.0.1:`port`, its files under `directory`."""

    directory: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = ngircd_binary()
        if binary is None:
            raise GroupChatError(
                "the scenario's group chat is an IRC room and needs ngircd (apt install ngircd)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "ngircd.conf"
        conf.write_text(
            "[Global]\nName = irc.eval.local\nInfo = persyn eval continuity\nListen = 127.0.0.1\n"
            f"Ports = {self.port}\nMotdPhrase = a week\n"
            "[Limits]\nMaxNickLength = 30\nMaxConnectionsIP = 0\nPingTimeout = 600\nPongTimeout = 60\n"
            "[Options]\nPAM = no\nIdent = no\nDNS = no\n",
            encoding="utf-8",
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "persyn.evals.tether", binary, "-n", "-f", str(conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise GroupChatError(f"ngircd did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the tether stops the server
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class IrcPerson:
    """A person in the room: a nick, what the agent said there, who is in the room."""

    def __init__(self, nick: str) -> None:
        self.nick = nick
        self.present: set[str] = set()  # nicks in ROOM, lower case
        self._lines: asyncio.Queue[tuple[str, str]] = asyncio.Queue()  # (nick, text) said in ROOM
        self._changed = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def connect(self, port: int) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", port)
        welcomed = asyncio.Event()
        self._task = asyncio.ensure_future(self._read(welcomed))
        await self._send(f"NICK {self.nick}")
        await self._send(f"USER {self.nick} 0 * :{self.nick}")
        await asyncio.wait_for(welcomed.wait(), _WAIT)
        await self._send(f"JOIN {ROOM}")

    async def _send(self, line: str) -> None:
        assert self._writer is not None
        self._writer.write(line.encode() + b"\r\n")
        await self._writer.drain()

    async def _read(self, welcomed: asyncio.Event) -> None:
        assert self._reader is not None
        while raw := await self._reader.readline():
            message = parse_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
            command, params, nick = message.command, message.params, message.nick.lower()
            if command == "PING":
                await self._send(f"PONG :{params[-1] if params else ''}")
            elif command == "001":
                welcomed.set()
            elif command == "JOIN" and params[:1] and params[0].lower() == ROOM:
                self.present.add(nick)
            elif command in ("PART", "QUIT") or (command == "KICK" and len(params) > 1):
                self.present.discard(params[1].lower() if command == "KICK" else nick)
            elif command == "PRIVMSG" and len(params) > 1 and params[0].lower() == ROOM:
                await self._lines.put((nick, params[-1]))
            self._changed.set()

    async def await_present(self, nick: str, timeout: float = _WAIT) -> bool:
        """Wait until `nick` has joined the room (False if it did not within `timeout`)."""
        deadline = time.monotonic() + timeout
        while nick.lower() not in self.present:
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return False
        return True

    async def say(self, text: str, listen_to: str, timeout: float, quiet: float = 1.5) -> str | None:
        """Say `text` in the room; what `listen_to` said there next (its lines until it was
        quiet for `quiet` seconds), or None if it said nothing within `timeout`."""
        while not self._lines.empty():  # what was said before this line is not its answer
            self._lines.get_nowait()
        await self._send(f"PRIVMSG {ROOM} :{text}")
        said: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            wait = quiet if said else deadline - time.monotonic()
            if wait <= 0:
                break
            try:
                nick, line = await asyncio.wait_for(self._lines.get(), wait)
            except TimeoutError:
                break
            if nick == listen_to.lower():
                said.append(line)
        return " ".join(said) if said else None

    async def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(OSError):
                await self._send("QUIT :the week is over")
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
