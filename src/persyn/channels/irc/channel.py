"""The IRC adapter (SPEC §3): one connection per served agent, a small asyncio client of our own.

Why our own client: IRC is a line protocol of a dozen commands for what an agent needs
(register, SASL PLAIN, join, PRIVMSG, PING, nick collisions, kicks), and the maintained
Python libraries are either synchronous (`irc`) or bring their own event loop model; a
hundred lines on `asyncio.open_connection` keep one loop and one error path.

What it does:
- Every served agent connects as its own nick (`[channels.irc] nick`, `{agent}` filled),
  joins the configured rooms and observes every message there; a direct message, or one
  that names the nick, is addressed to the agent. Everything else is overheard traffic,
  which gets the engagement decision before any draft (`runtime/turn/activation.py`).
- Senders resolve through the directory key (service `irc`, channel the network, speaker
  the nick), so one person is one contact in every room and in private; nicks of this
  deployment's other agents and `[channels.irc] bots` are marked `agent`.
- Replies go out as PRIVMSG to the room or the nick, split on word boundaries at
  `line_bytes`, or less when the line as the server relays it (our `nick!user@host` prefix
  and the target included) would pass IRC's 512 bytes. A delivery while disconnected raises, so the outbox keeps the row and retries
  it; on every (re)connection the backlog is delivered (`RuntimeAPI.deliver_pending`), and
  `Channel.deliver_outbound` drops an outbox id already shown.
- The connection is re-established with a doubling, jittered backoff (`runtime.channel.Backoff`,
  `reconnect_min_seconds` .. `reconnect_max_seconds`) after a server restart or a netsplit; rooms are rejoined, and a
  kick rejoins after a short wait. A taken nick gets `_` appended until one is free.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import ssl
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from persyn.channels.irc.config import IrcConfig
from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError, InputError
from persyn.core.events import Event, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Backoff, Channel

__all__ = ["IrcChannel", "IrcMessage", "parse_line", "split_text"]

log = logging.getLogger(__name__)
_ORDER_STEP = timedelta(milliseconds=1)

SERVICE = "irc"
_KICK_REJOIN_SECONDS = 5.0
# Registered under a stand-in nick (the wanted one was taken, often by our own connection's
# ghost after a network blip): ask for the wanted one again this often, and at once when its
# holder is seen leaving or renaming.
_REGAIN_NICK_SECONDS = 60.0
_LINE_BYTES = 510  # RFC 1459 §2.3: 512 bytes a line, CRLF included
_HOST_BYTES = 63  # the longest host name label a server may show in a prefix
_MIN_TEXT_BYTES = 32  # a target so long that less fits is the server's to refuse
_FORMATTING = re.compile(r"\x03(\d{1,2}(,\d{1,2})?)?|[\x02\x0f\x11\x16\x1d\x1e\x1f]")


@dataclass(frozen=True)
class IrcMessage:
    """One parsed line: `:prefix COMMAND params... :trailing`."""

    prefix: str
    command: str
    params: tuple[str, ...]

    @property
    def nick(self) -> str:
        return self.prefix.split("!", 1)[0]


def parse_line(line: str) -> IrcMessage:
    """A server line (tags, if any, dropped) as a message; the trailing parameter is the last."""
    if line.startswith("@"):
        line = line.partition(" ")[2]
    prefix = ""
    if line.startswith(":"):
        prefix, _, line = line[1:].partition(" ")
    head, sep, trailing = line.partition(" :")
    words = head.split()
    command = words[0].upper() if words else ""
    params = tuple(words[1:]) + ((trailing,) if sep else ())
    return IrcMessage(prefix=prefix, command=command, params=params)


def split_text(text: str, limit: int) -> list[str]:
    """`text` as PRIVMSG bodies of at most `limit` UTF-8 bytes: one per line of the text,
    long lines cut at the last space that fits (mid-word only for a word longer than a
    line). Blank lines are dropped; IRC has no empty message."""
    pieces: list[str] = []
    for line in text.replace("\r", "").split("\n"):
        rest = line.strip()
        while rest:
            if len(rest.encode()) <= limit:
                pieces.append(rest)
                break
            cut = len(rest.encode()[:limit].decode("utf-8", "ignore"))
            space = rest.rfind(" ", 0, cut + 1)
            if space > 0:
                cut = space
            pieces.append(rest[:cut].rstrip())
            rest = rest[cut:].strip()
    return pieces


def _plain(text: str) -> str:
    """Incoming text without colour and formatting codes; a CTCP ACTION as `* acts`."""
    if text.startswith("\x01ACTION ") and text.endswith("\x01"):
        text = f"* {text[8:-1]}"
    return _FORMATTING.sub("", text).replace("\x01", "")


def _same_nick(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()


def _names(text: str, nick: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(nick)}(?![\w-])", text, re.IGNORECASE) is not None


class _Connection:
    """One agent's connection: registers, joins, reads, and reconnects with backoff."""

    def __init__(self, channel: IrcChannel, agent: AgentConfig) -> None:
        self._owner = channel
        self.agent = agent
        self.wanted_nick = channel.config.nick_for(agent.name)
        self.nick = self.wanted_nick
        self.ready = asyncio.Event()
        self.connections = 0  # completed registrations (a test waits for a reconnection by it)
        self.attempts = 0  # connections tried, registered or not
        self.joined: set[str] = set()
        self._writer: asyncio.StreamWriter | None = None
        self._send_lock = asyncio.Lock()
        self.userhost: str | None = None  # `user@host` as the server shows it (from our JOIN)
        self.link = channel.track(self.wanted_nick, channel.now)

    async def run(self) -> None:
        config = self._owner.config
        backoff = Backoff(config.reconnect_min_seconds, config.reconnect_max_seconds)
        while True:
            try:
                await self._session()
                backoff.reset()  # it was up: start the backoff over
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("irc %s (%s): %s", config.server, self.nick, exc)
                self.link.lost(exc)
            self.ready.clear()
            self.joined.clear()
            self._writer = None
            await asyncio.sleep(backoff.next())

    async def _session(self) -> None:
        config = self._owner.config
        context = ssl.create_default_context() if config.tls else None
        self.attempts += 1
        reader, writer = await asyncio.open_connection(config.server, config.port, ssl=context)
        self._writer = writer
        self.nick = self.wanted_nick
        self.userhost = None
        try:
            password = self._owner.password
            if config.sasl and password:
                await self._send_raw("CAP REQ :sasl")
            elif password:
                await self._send_raw(f"PASS {password}")
            await self._send_raw(f"NICK {self.nick}")
            await self._send_raw(f"USER {self.nick[:10]} 0 * :{self.agent.name} (persyn)")
            while True:
                raw = await reader.readline()
                if not raw:
                    raise ConnectionError("the server closed the connection")
                await self._handle(parse_line(raw.decode("utf-8", "replace").rstrip("\r\n")))
        finally:
            self.ready.clear()
            self._writer = None
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, message: IrcMessage) -> None:
        command, params = message.command, message.params
        if command == "PING":
            await self._send_raw(f"PONG :{params[-1] if params else ''}")
        elif command == "ERROR":  # the server's last word before it closes (a bad password, a ban)
            log.warning(
                "irc %s refused %s: %s", self._owner.config.server, self.nick, params[-1] if params else ""
            )
        elif command == "CAP" and len(params) >= 3 and params[1] == "ACK":
            await self._send_raw("AUTHENTICATE PLAIN")
        elif command == "AUTHENTICATE" and params[:1] == ("+",):
            secret = f"{self.nick}\0{self.nick}\0{self._owner.password or ''}".encode()
            await self._send_raw(f"AUTHENTICATE {base64.b64encode(secret).decode()}")
        elif command in ("903", "904", "905", "906", "907"):
            if command != "903":
                log.warning("irc %s: SASL login failed for %s", self._owner.config.server, self.nick)
            await self._send_raw("CAP END")
        elif command == "001":
            self.nick = params[0] if params else self.nick
            for room in self._owner.config.channels:
                await self._send_raw(f"JOIN {room}")
            self.connections += 1
            self.ready.set()
            self.link.up()
            self._owner.connected(self)
            if self.nick != self.wanted_nick:
                self._owner.later(_REGAIN_NICK_SECONDS, self._regain_nick(self.connections))
        elif command in ("432", "433", "436", "437") and not self.ready.is_set():
            # A taken (or refused) nick while registering: try the next one.
            self.nick = (self.nick + "_")[:30] if command != "432" else f"persyn{len(self.nick)}"
            await self._send_raw(f"NICK {self.nick}")
        elif command == "NICK" and message.nick == self.nick and params:
            self.nick = params[-1]
        elif command in ("QUIT", "NICK") and _same_nick(message.nick, self.wanted_nick):
            if self.ready.is_set() and self.nick != self.wanted_nick:  # its holder let it go
                await self._send_raw(f"NICK {self.wanted_nick}")
        elif command == "JOIN" and message.nick == self.nick and params:
            self.joined.add(params[0].lower())
            if "!" in message.prefix:
                self.userhost = message.prefix.split("!", 1)[1]
        elif command == "KICK" and len(params) >= 2 and params[1] == self.nick:
            room = params[0]
            self.joined.discard(room.lower())
            log.warning("irc: %s was kicked from %s: %s", self.nick, room, params[-1])
            self._owner.later(_KICK_REJOIN_SECONDS, self._rejoin(room))
        elif command == "PRIVMSG" and len(params) >= 2:
            text = params[1]
            if text.startswith("\x01") and not text.startswith("\x01ACTION "):
                return  # a CTCP request (VERSION, PING...) is the client's business, not said to anyone
            await self._owner.received(self, message.nick, params[0], _plain(text))

    async def _regain_nick(self, session: int) -> None:
        """Ask for the wanted nick again while this registration still goes by another one."""
        if not self.ready.is_set() or self.connections != session or self.nick == self.wanted_nick:
            return
        await self._send_raw(f"NICK {self.wanted_nick}")
        self._owner.later(_REGAIN_NICK_SECONDS, self._regain_nick(session))

    async def _rejoin(self, room: str) -> None:
        if self.ready.is_set():
            await self._send_raw(f"JOIN {room}")

    async def _send_raw(self, line: str) -> None:
        writer = self._writer
        if writer is None:
            raise ChannelError(f"not connected to IRC as {self.nick!r}")
        async with self._send_lock:
            writer.write(line.replace("\r", " ").replace("\n", " ").encode() + b"\r\n")
            await writer.drain()

    async def say(self, target: str, text: str) -> None:
        if not self.ready.is_set():
            raise ChannelError(f"{self.nick!r} is not connected to IRC; the message waits in the outbox")
        for piece in split_text(text, self.text_bytes(target)):
            await self._send_raw(f"PRIVMSG {target} :{piece}")

    def text_bytes(self, target: str) -> int:
        """The longest PRIVMSG text to `target` that others receive whole: IRC's 512 bytes
        hold the line as the server relays it, `:nick!user@host PRIVMSG target :` and CRLF
        included (a longer line is cut by the server, or refused: ngircd closes the
        connection). Before our own JOIN shows `user@host`, the longest one is assumed."""
        userhost = self.userhost or f"~{self.nick[:10]}@{'h' * _HOST_BYTES}"
        head = f":{self.nick}!{userhost} PRIVMSG {target} :".encode()
        return max(_MIN_TEXT_BYTES, min(self._owner.config.line_bytes, _LINE_BYTES - len(head)))


class IrcChannel(Channel):
    """The `irc` service: every served agent's connection to `[channels.irc] server`."""

    service = SERVICE

    def __init__(
        self,
        config: IrcConfig,
        agents: Mapping[str, AgentConfig],
        api: RuntimeAPI,
        *,
        password: str | None = None,
    ) -> None:
        if not config.server:
            raise ChannelError("[channels.irc] server is not set")
        self.config = config
        self.password = password
        self._api = api
        self._network = config.server.lower()
        # The last arrival time given in each conversation: lines that arrive within one clock
        # reading are stamped a millisecond apart, so the dialog (read in time order) keeps
        # the order they were said in.
        self._stamped: dict[str, datetime] = {}
        chosen = {name.lower() for name in config.agents}
        self.connections = {
            agent_id: _Connection(self, agent)
            for agent_id, agent in agents.items()
            if not chosen or agent.name.lower() in chosen
        }
        self._tasks: set[asyncio.Task[None]] = set()

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._api.attach_channel(self)
        for connection in self.connections.values():
            self._spawn(connection.run())

    async def stop(self) -> None:
        self._api.detach_channel(self)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def later(self, seconds: float, coroutine: Coroutine[Any, Any, None]) -> None:
        async def run() -> None:
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                coroutine.close()  # stopped before its time: never started, not left unawaited
                raise
            await coroutine

        self._spawn(run())

    def now(self) -> datetime:
        return self._api.clock.now()

    def connected(self, connection: _Connection) -> None:
        """Registered (again): what waited in the outbox goes out now."""
        self._spawn(self._deliver_backlog())

    async def _deliver_backlog(self) -> None:
        try:
            await self._api.deliver_pending(SERVICE)
        except Exception as exc:  # the outbox poll retries it
            log.warning("irc: delivering the backlog failed: %s", exc)

    # the channel port ----------------------------------------------------------------------
    def serves(self, agent_id: str) -> bool:
        return agent_id in self.connections

    async def deliver(self, outbound: Outbound) -> None:
        connection = self.connections.get(outbound.agent_id)
        if connection is None:
            raise ChannelError(f"agent {outbound.agent_id!r} is not on IRC here")
        await connection.say(outbound.channel, outbound.text)

    # inbound ---------------------------------------------------------------------------------
    def _is_agent(self, nick: str) -> bool:
        lowered = nick.lower()
        if lowered in (bot.lower() for bot in self.config.bots):
            return True
        return any(lowered == c.nick.lower() for c in self.connections.values())

    async def received(self, connection: _Connection, nick: str, target: str, text: str) -> None:
        """A PRIVMSG seen by `connection`: an event for its agent (rooms: every message)."""
        if not text.strip() or nick.lower() == connection.nick.lower():
            return
        private = target.lower() == connection.nick.lower()
        # IRC compares nicks and room names without case: so does the channel key, or one
        # person's private talk would split with the case of their nick (and a redirect,
        # which names the speaker id, would land in neither).
        where = nick.lower() if private else target.lower()
        now = self._api.clock.now()
        last = self._stamped.get(where)
        if last is not None and now <= last:
            now = last + _ORDER_STEP
        if len(self._stamped) > 4096:  # many one-off speakers: forget, order within one line is kept
            self._stamped.clear()
        self._stamped[where] = now
        event = Event(
            id=new_id(now),
            agent_id=connection.agent.id,
            service=SERVICE,
            channel=where,
            speaker=Speaker(
                service=SERVICE,
                channel=self._network,
                speaker_id=nick.lower(),
                display_name=nick,
                kind="agent" if self._is_agent(nick) else "human",
            ),
            text=text,
            received_at=now,
            addressed=private or _names(text, connection.nick),
        )
        try:
            self._api.validate_text(text)
            await self._api.submit(event)
        except InputError as exc:
            log.warning("irc: dropped a message from %s on %s: %s", nick, where, exc)
