"""Discord's Gateway v10 connection (discord.com/developers/docs/topics/gateway): one session
kept alive for ever, handing each dispatch to the adapter.

- Connect to `{url}?v=10&encoding=json`; HELLO gives the heartbeat interval. The first
  heartbeat goes after `interval * jitter` (jitter in [0, 1), as the docs ask), the rest every
  interval, each carrying the last sequence seen. A heartbeat whose previous one was never
  ACKed (op 11) means a zombie connection: it is closed and resumed.
- A new session IDENTIFYs with the intents the agent needs: GUILDS, GUILD_MESSAGES,
  DIRECT_MESSAGES and MESSAGE_CONTENT (privileged: enable it in the developer portal).
  IDENTIFYs are spaced at least `IDENTIFY_SPACING` apart (max_concurrency 1) and wait for the
  day's `session_start_limit` to reset when it is spent.
- After a drop (a closed socket, op 7 RECONNECT, a missed ACK, an outage) it RESUMEs on the
  READY's `resume_gateway_url` with the session id and last sequence: Discord replays what was
  dispatched meanwhile. op 9 INVALID_SESSION `d: false` (or a close code that ends the session)
  means a fresh IDENTIFY on a new connection after the backoff's wait (at least 0.5 s, and
  `IDENTIFY_SPACING` since the last IDENTIFY). Close codes that a retry cannot fix (4004 bad token,
  4012–4014 version or intents) are reported as the link's failure and retried slowly: the
  operator may fix the token or the portal without restarting the agent.
- Attempts back off (`runtime.channel.Backoff`, jittered, capped); the link's state
  (`LinkTracker`) goes up on READY/RESUMED and is lost with the reason on each drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from persyn.channels.discord.rest import DiscordRest
from persyn.core.errors import ChannelError
from persyn.runtime.channel import Backoff, LinkTracker

__all__ = ["INTENTS", "Gateway", "GatewayClosed"]

log = logging.getLogger(__name__)

# Gateway intents (…/topics/gateway#gateway-intents).
GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15
INTENTS = GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
_DRAIN_SECONDS = 10.0  # how long a stop waits for received messages to be stored
IDENTIFY_SPACING = 5.0  # seconds between IDENTIFYs with max_concurrency 1
# Close codes after which the session cannot be resumed (…/opcodes-and-status-codes).
_SESSION_ENDED = {4003, 4004, 4007, 4009, 4010, 4011, 4012, 4013, 4014}
_NOT_RETRYABLE = {
    4004: "authentication failed (check DISCORD_BOT_TOKEN)",
    4010: "invalid shard",
    4011: "sharding required",
    4012: "invalid API version",
    4013: "invalid intents",
    4014: "disallowed intents (enable MESSAGE CONTENT in the developer portal)",
}

Dispatch = Callable[[str, dict[str, Any]], Awaitable[None]]


class GatewayClosed(ChannelError):
    """The connection ended; `resumable`: the session may be resumed."""

    def __init__(self, reason: str, *, resumable: bool) -> None:
        super().__init__(reason)
        self.resumable = resumable


class Gateway:
    """One bot's gateway session. `run` until cancelled; `on_dispatch(type, data)` for each
    dispatch after READY (READY and RESUMED included)."""

    def __init__(
        self,
        rest: DiscordRest,
        token: str,
        link: LinkTracker,
        on_dispatch: Dispatch,
        *,
        gateway_url: str | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._rest, self._token, self._link, self._on_dispatch = rest, token, link, on_dispatch
        self._configured_url = gateway_url
        self._backoff = backoff or Backoff(1.0, 60.0)
        self.session_id: str | None = None
        self.resume_url: str | None = None
        self.seq: int | None = None
        self.user_id: str | None = None
        self._last_identify = float("-inf")
        self._acked = True
        self.zombies = 0  # connections closed for a missed ACK
        # Dispatches wait here for the adapter, in order, so the reader never falls behind the
        # heartbeat ACKs (a burst being stored must not look like a zombie connection).
        self._inbox: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

    async def run(self) -> None:
        handing = asyncio.ensure_future(self._hand_over())
        try:
            await self._connect_forever()
        finally:
            # Stopping: what was received is still handed over (bounded), never dropped silently.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._inbox.join(), _DRAIN_SECONDS)
            if not self._inbox.empty():
                log.warning("discord: stopped with %d received messages not yet stored", self._inbox.qsize())
            handing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handing

    async def _hand_over(self) -> None:
        while True:
            kind, data = await self._inbox.get()
            try:
                await self._on_dispatch(kind, data)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("discord: handling a %s dispatch failed", kind)
            finally:
                self._inbox.task_done()

    async def _connect_forever(self) -> None:
        while True:
            try:
                await self._connect_once()
                reason, resumable = "the gateway closed the connection", True
            except asyncio.CancelledError:
                raise
            except GatewayClosed as closed:
                reason, resumable = str(closed), closed.resumable
            except (aiohttp.ClientError, OSError, TimeoutError, ChannelError, ValueError) as exc:
                reason, resumable = f"{type(exc).__name__}: {exc}", True
            if not resumable:
                self.session_id = self.resume_url = self.seq = None
            log.warning(
                "discord gateway: %s; %s", reason, "resuming" if self.session_id else "identifying anew"
            )
            self._link.lost(reason)
            await asyncio.sleep(self._backoff.next())

    async def _url(self) -> str:
        if self.session_id and self.resume_url:
            return self.resume_url
        if self._configured_url:
            return self._configured_url
        found = await self._rest.call("GET", "/gateway/bot")
        url = found.get("url") if isinstance(found, dict) else None
        if not isinstance(url, str) or not url.startswith(("wss://", "ws://")):
            raise ChannelError(f"GET /gateway/bot named no gateway URL: {found!r:.200}")
        limit = found.get("session_start_limit") or {}
        if isinstance(limit, dict) and limit.get("remaining") == 0:
            wait = float(limit.get("reset_after") or 0) / 1000
            log.warning("discord gateway: the day's session starts are spent; identifying in %gs", wait)
            await asyncio.sleep(wait)
        return url

    async def _connect_once(self) -> None:
        url = await self._url()
        if self.session_id is None:  # an IDENTIFY is due: spaced before connecting, not while HELLO waits
            wait = self._last_identify + IDENTIFY_SPACING - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
        client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
        async with client, client.ws_connect(f"{url.rstrip('/')}/?v=10&encoding=json", heartbeat=None) as ws:
            hello = await asyncio.wait_for(ws.receive(), 30)
            interval = _hello_interval(hello)
            self._acked = True
            beating = asyncio.ensure_future(self._heartbeat(ws, interval))
            try:
                if self.session_id is not None and self.seq is not None:
                    await ws.send_str(
                        json.dumps(
                            {
                                "op": 6,
                                "d": {"token": self._token, "session_id": self.session_id, "seq": self.seq},
                            }
                        )
                    )
                else:
                    await self._identify(ws)
                await self._read(ws)
            finally:
                beating.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await beating
            code = ws.close_code
        if code in _NOT_RETRYABLE:
            raise GatewayClosed(f"closed {code}: {_NOT_RETRYABLE[code]}", resumable=False)
        if code in _SESSION_ENDED:
            raise GatewayClosed(f"closed {code}: the session ended", resumable=False)
        if code is not None and code >= 4000:
            raise GatewayClosed(f"closed {code}", resumable=True)

    async def _identify(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._last_identify = asyncio.get_running_loop().time()
        properties = {"os": "linux", "browser": "persyn", "device": "persyn"}
        payload = {"op": 2, "d": {"token": self._token, "intents": INTENTS, "properties": properties}}
        await ws.send_str(json.dumps(payload))

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse, interval: float) -> None:
        await asyncio.sleep(interval * random.random())
        while not ws.closed:
            if not self._acked:
                self.zombies += 1
                log.warning("discord gateway: no heartbeat ACK within %gs; reconnecting", interval)
                await ws.close(code=4000, message=b"zombied connection")
                return
            self._acked = False
            await ws.send_str(json.dumps({"op": 1, "d": self.seq}))
            await asyncio.sleep(interval)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                log.warning("discord gateway: ignored a %s frame", frame.type.name)
                continue
            try:
                payload = json.loads(frame.data)
            except ValueError:
                log.warning("discord gateway: ignored a frame that is not JSON: %.200r", frame.data)
                continue
            if not isinstance(payload, dict) or not isinstance(payload.get("op"), int):
                log.warning("discord gateway: ignored a payload without an integer op: %.200r", payload)
                continue
            await self._handle(ws, payload)

    async def _handle(self, ws: aiohttp.ClientWebSocketResponse, payload: dict[str, Any]) -> None:
        op, data = payload["op"], payload.get("d")
        if op == 11:
            self._acked = True
        elif op == 1:  # Discord asks for a heartbeat now
            await ws.send_str(json.dumps({"op": 1, "d": self.seq}))
        elif op == 7:
            log.info("discord gateway: asked to reconnect (op 7)")
            await ws.close(code=4000, message=b"reconnect requested")
        elif op == 9:
            log.info("discord gateway: invalid session (resumable: %s)", data is True)
            if data is not True:  # a fresh IDENTIFY, on a new connection after the backoff's wait
                self.session_id = self.resume_url = self.seq = None
            await ws.close(code=4000, message=b"invalid session")
        elif op == 0:
            await self._dispatched(payload)
        else:
            log.warning("discord gateway: ignored unknown opcode %r", op)

    async def _dispatched(self, payload: dict[str, Any]) -> None:
        seq, kind, data = payload.get("s"), payload.get("t"), payload.get("d")
        if isinstance(seq, int) and not isinstance(seq, bool) and (self.seq is None or seq > self.seq):
            self.seq = seq
        if not isinstance(kind, str):
            log.warning("discord gateway: ignored a dispatch without a type: %.200r", payload)
            return
        if kind == "READY":
            ready: dict[str, Any] = data if isinstance(data, dict) else {}
            session, user = ready.get("session_id"), ready.get("user") or {}
            if (
                not isinstance(session, str)
                or not isinstance(user, dict)
                or not isinstance(user.get("id"), str)
            ):
                raise ChannelError(f"READY without a session_id or user id: {ready!r:.200}")
            self.session_id, self.user_id = session, str(user["id"])
            resume = ready.get("resume_gateway_url")
            self.resume_url = (
                resume if isinstance(resume, str) and resume.startswith(("wss://", "ws://")) else None
            )
        if kind in ("READY", "RESUMED"):
            self._backoff.reset()
            self._link.up()
        if kind == "RESUMED" or isinstance(data, dict):
            self._inbox.put_nowait((kind, data if isinstance(data, dict) else {}))


def _hello_interval(frame: aiohttp.WSMessage) -> float:
    if frame.type != aiohttp.WSMsgType.TEXT:
        raise GatewayClosed(
            f"no HELLO: the gateway sent a {frame.type.name} frame (close code {frame.data})", resumable=True
        )
    try:
        hello = json.loads(frame.data)
        interval = hello["d"]["heartbeat_interval"] if hello["op"] == 10 else None
    except (ValueError, KeyError, TypeError) as exc:
        raise ChannelError(f"the gateway's first payload is not a HELLO: {frame.data!r:.200}") from exc
    if not isinstance(interval, int | float) or interval <= 0:
        raise ChannelError(f"the gateway's HELLO has no usable heartbeat_interval: {frame.data!r:.200}")
    return float(interval) / 1000
