"""A wire-faithful fake of Discord for the Discord adapter's tests (Discord cannot run here): the
Gateway v10 over a real WebSocket and the REST calls the adapter makes, on loopback (aiohttp's
server), with the shapes of Discord's public developer documentation:

- Gateway (discord.com/developers/docs/topics/gateway, .../topics/opcodes-and-status-codes):
  op 10 HELLO `{heartbeat_interval}`; op 2 IDENTIFY `{token, intents, properties}` → op 0
  `READY` `{v, user, session_id, resume_gateway_url}`; op 1 HEARTBEAT `d`=last sequence → op 11
  HEARTBEAT ACK; op 0 dispatches with a sequence `s` and type `t` (`MESSAGE_CREATE`);
  op 6 RESUME `{token, session_id, seq}` → the missed dispatches replayed, then `RESUMED`;
  op 9 INVALID SESSION `d`=false when the session cannot be resumed; op 7 RECONNECT; close codes
  4001 unknown opcode, 4002 decode error, 4003 not authenticated, 4004 authentication failed,
  4005 already authenticated, 4008 rate limited (IDENTIFY more than `identify_limit` times).
- REST (discord.com/developers/docs/reference, .../topics/rate-limits,
  .../resources/message#create-message): `GET /api/v10/gateway/bot` `{url, shards,
  session_start_limit}`, `GET /api/v10/users/@me`, `POST /api/v10/channels/{id}/messages`
  `{content, message_reference}` (2,000 characters at most: 400 with code 50035 otherwise),
  `POST /api/v10/users/@me/channels` `{recipient_id}` → the DM channel `{id, type: 1,
  recipients}` (.../resources/user#create-dm), `Authorization: Bot TOKEN` (401 `{"message": "401: Unauthorized", "code": 0}` otherwise);
  every answer carries `X-RateLimit-Limit/-Remaining/-Reset/-Reset-After/-Bucket`, and a
  bucket spent answers 429 `{message, retry_after, global}` with `Retry-After` and
  `X-RateLimit-Scope`; `global_429` answers the global limit (`X-RateLimit-Global: true`).
- Attachments: a message's `attachments` `[{id, filename, size, url, content_type}]`, the
  file served at its `url` (the CDN).

Control for tests: `say(...)` dispatches a MESSAGE_CREATE (kept for RESUME replay even while no
gateway is connected), `stop()`/`start()` (the same port: an outage), `zombie` (heartbeats no
longer acked), `drop()` (the socket closed without a close frame), `reconnect()` (op 7),
`invalid_session_next` (the next RESUME is refused with op 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

__all__ = ["BOT_USER", "TOKEN", "FakeDiscord", "Sent"]

TOKEN = "MTIz.fake-discord-token"
BOT_USER = {"id": "900", "username": "ada", "discriminator": "0", "bot": True, "global_name": "Ada"}
HEARTBEAT_MS = 1000
_BUCKET_LIMIT = 5  # messages per channel per window, as Discord's create-message route allows


@dataclass
class Sent:
    channel_id: str
    content: str
    reference: str | None  # the message it answers (message_reference.message_id)


@dataclass
class _Session:
    session_id: str
    seq: int = 0
    missed: list[dict[str, Any]] = field(default_factory=lambda: [])
    ws: web.WebSocketResponse | None = None


class FakeDiscord:
    """Discord's gateway and REST API as far as the adapter uses them."""

    def __init__(self, *, bucket_limit: int = _BUCKET_LIMIT, identify_limit: int = 1000) -> None:
        self.sent: list[Sent] = []
        self.ops: list[int] = []  # every gateway opcode received, in order
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.files: dict[str, bytes] = {}
        self.zombie = False
        self.invalid_session_next = False
        self.global_429 = 0  # this many REST calls answer the global rate limit first
        self.bucket_limit = bucket_limit
        self.identify_limit = identify_limit
        self.rate_limited = 0  # 429s answered
        self.connections = 0
        self.users: dict[str, dict[str, Any]] = {}  # user id → user: who exists (every author)
        self.dm_channels: dict[str, str] = {}  # user id → the DM channel opened with them
        self._session: _Session | None = None
        self._sessions = 0
        self._next_id = 1_000_000
        self._buckets: dict[str, int] = {}  # channel id → calls left in this window
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.gateway_url = f"ws://127.0.0.1:{self.port}/gateway"

    # lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway/", self._gateway)  # wss://gateway.discord.gg/?v=10…
        app.router.add_get("/api/v10/gateway/bot", self._gateway_bot)
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_post("/api/v10/channels/{channel}/messages", self._create_message)
        app.router.add_post("/api/v10/users/@me/channels", self._create_dm)
        app.router.add_get("/attachments/{name}", self._file)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()

    async def stop(self) -> None:
        """An outage: every connection cut, the port closed (the session survives, as Discord's
        does for a while: a RESUME after `start` replays what was said meanwhile)."""
        if self._session is not None and self._session.ws is not None:
            with contextlib.suppress(Exception):
                await self._session.ws.close(code=1001)
            self._session.ws = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    # what happens in Discord ----------------------------------------------------------------
    def message(
        self,
        content: str,
        *,
        author: dict[str, Any],
        channel_id: str,
        guild_id: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """Someone says `content` (a MESSAGE_CREATE dispatch); returns the message id."""
        self.users.setdefault(str(author.get("id")), author)
        self._next_id += 1
        data: dict[str, Any] = {
            "id": str(self._next_id),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": datetime.now(UTC).isoformat(),
            "attachments": attachments or [],
            "mentions": [],
            "type": 0,
            **({"guild_id": guild_id} if guild_id else {}),
            **extra,
        }
        self.dispatch("MESSAGE_CREATE", data)
        return data["id"]

    def attachment(
        self, name: str, data: bytes, content_type: str, *, size: int | None = None
    ) -> dict[str, Any]:
        """An attachment object whose file this fake serves at its `url`."""
        self.files[name] = data
        self._next_id += 1
        return {
            "id": str(self._next_id),
            "filename": name,
            "size": len(data) if size is None else size,
            "url": f"{self.url}/attachments/{name}",
            "proxy_url": f"{self.url}/attachments/{name}",
            "content_type": content_type,
        }

    def dispatch(self, event_type: str, data: dict[str, Any]) -> None:
        """An op 0 dispatch to the session: sent now if connected, replayed on RESUME if not."""
        session = self._session
        if session is None:
            return
        session.seq += 1
        payload = {"op": 0, "t": event_type, "s": session.seq, "d": data}
        session.missed.append(payload)
        if session.ws is not None and not session.ws.closed:
            self._later(self._send(session.ws, payload))

    def raw(self, payload: object) -> None:
        """Any payload sent as is (bad input: an unknown opcode, a missing field)."""
        if self._session is not None and self._session.ws is not None:
            self._later(self._send(self._session.ws, payload))

    async def reconnect(self) -> None:
        """op 7: Discord asks the client to reconnect and resume."""
        if self._session is not None and self._session.ws is not None:
            await self._send(self._session.ws, {"op": 7, "d": None})

    async def drop(self) -> None:
        """The connection closed under the client (a network blip); the session stays resumable."""
        if self._session is not None and self._session.ws is not None:
            await self._session.ws.close(code=4000, message=b"Unknown error")

    def _later(self, sending: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(sending)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # gateway --------------------------------------------------------------------------------
    async def _send(self, ws: web.WebSocketResponse, payload: object) -> None:
        with contextlib.suppress(Exception):
            await ws.send_str(json.dumps(payload))

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        if request.query.get("v") != "10" or request.query.get("encoding") != "json":
            await ws.close(code=4012, message=b"Invalid API version")
            return ws
        await self._send(ws, {"op": 10, "d": {"heartbeat_interval": HEARTBEAT_MS}})
        ready = False
        async for frame in ws:
            if frame.type != WSMsgType.TEXT:
                break
            try:
                payload = json.loads(frame.data)
                op, data = payload["op"], payload.get("d")
            except (ValueError, KeyError, TypeError):
                await ws.close(code=4002, message=b"Error while decoding payload.")
                break
            self.ops.append(op)
            if op == 1:
                if not self.zombie:
                    await self._send(ws, {"op": 11})
            elif op == 2:
                if ready:
                    await ws.close(code=4005, message=b"Already authenticated.")
                    break
                if not isinstance(data, dict) or data.get("token") != TOKEN:
                    await ws.close(code=4004, message=b"Authentication failed.")
                    break
                self.identifies.append(data)
                if len(self.identifies) > self.identify_limit:
                    await ws.close(code=4008, message=b"Rate limited.")
                    break
                self._sessions += 1
                old = self._session
                if old is not None and old.ws is not None and old.ws is not ws:
                    await old.ws.close(code=4009)
                self._session = _Session(session_id=f"session-{self._sessions}", ws=ws)
                ready = True
                self._session.seq += 1
                ready_data = {
                    "v": 10,
                    "user": BOT_USER,
                    "guilds": [],
                    "session_id": self._session.session_id,
                    "resume_gateway_url": self.gateway_url,
                    "application": {"id": BOT_USER["id"], "flags": 0},
                }
                await self._send(ws, {"op": 0, "t": "READY", "s": self._session.seq, "d": ready_data})
            elif op == 6:
                self.resumes.append(data if isinstance(data, dict) else {})
                session = self._session
                if (
                    self.invalid_session_next
                    or session is None
                    or not isinstance(data, dict)
                    or data.get("token") != TOKEN
                    or data.get("session_id") != session.session_id
                    or not isinstance(data.get("seq"), int)
                ):
                    self.invalid_session_next = False
                    await self._send(ws, {"op": 9, "d": False})
                    continue
                session.ws, ready = ws, True
                for missed in session.missed:
                    if missed["s"] > data["seq"]:
                        await self._send(ws, missed)
                session.seq += 1
                await self._send(ws, {"op": 0, "t": "RESUMED", "s": session.seq, "d": None})
            elif not ready:
                await ws.close(code=4003, message=b"Not authenticated.")
                break
            else:
                await ws.close(code=4001, message=b"Unknown opcode.")
                break
        if self._session is not None and self._session.ws is ws:
            self._session.ws = None
        return ws

    # REST -----------------------------------------------------------------------------------
    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {TOKEN}"

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _unauthorised()
        limit = {"total": 1000, "remaining": 1000 - len(self.identifies), "reset_after": 86_400_000}
        body = {"url": self.gateway_url, "shards": 1, "session_start_limit": {**limit, "max_concurrency": 1}}
        return web.json_response(body)

    async def _me(self, request: web.Request) -> web.Response:
        return web.json_response(BOT_USER) if self._authorised(request) else _unauthorised()

    async def _create_message(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _unauthorised()
        if self.global_429 > 0:
            self.global_429 -= 1
            self.rate_limited += 1
            body = {"message": "You are being rate limited.", "retry_after": 0.2, "global": True}
            headers = {"Retry-After": "1", "X-RateLimit-Global": "true", "X-RateLimit-Scope": "global"}
            return web.json_response(body, status=429, headers=headers)
        channel = request.match_info["channel"]
        left = self._buckets.get(channel, self.bucket_limit)
        headers = {
            "X-RateLimit-Limit": str(self.bucket_limit),
            "X-RateLimit-Bucket": f"bucket-{channel}",
            "X-RateLimit-Reset-After": "0.300",
            "X-RateLimit-Reset": f"{datetime.now(UTC).timestamp() + 0.3:.3f}",
        }
        if left <= 0:
            self.rate_limited += 1
            asyncio.get_running_loop().call_later(0.3, self._buckets.pop, channel, None)
            body = {"message": "You are being rate limited.", "retry_after": 0.3, "global": False}
            headers |= {"X-RateLimit-Remaining": "0", "Retry-After": "1", "X-RateLimit-Scope": "user"}
            return web.json_response(body, status=429, headers=headers)
        self._buckets[channel] = left - 1
        if left == self.bucket_limit:  # the window starts with its first call
            asyncio.get_running_loop().call_later(0.3, self._buckets.pop, channel, None)
        headers["X-RateLimit-Remaining"] = str(left - 1)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"message": "400: Bad Request", "code": 50109}, status=400)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str) or not content or len(content) > 2000:
            error = {"message": "Invalid Form Body", "code": 50035}
            return web.json_response(error, status=400, headers=headers)
        reference = body.get("message_reference") or {}
        self.sent.append(Sent(channel, content, reference.get("message_id")))
        self._next_id += 1
        answer = {"id": str(self._next_id), "channel_id": channel, "content": content, "author": BOT_USER}
        return web.json_response(answer, headers=headers)

    async def _create_dm(self, request: web.Request) -> web.Response:
        """`POST /users/@me/channels` `{recipient_id}`: the DM channel with a user, the same one
        each time (discord.com/developers/docs/resources/user#create-dm); an unknown user is
        400 code 50033 "Invalid Recipient(s)" (.../topics/opcodes-and-status-codes#json)."""
        if not self._authorised(request):
            return _unauthorised()
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"message": "400: Bad Request", "code": 50109}, status=400)
        recipient = str(body.get("recipient_id")) if isinstance(body, dict) else ""
        user = self.users.get(recipient)
        if user is None:
            return web.json_response({"message": "Invalid Recipient(s)", "code": 50033}, status=400)
        if recipient not in self.dm_channels:
            self._next_id += 1
            self.dm_channels[recipient] = str(self._next_id)
        channel = {
            "id": self.dm_channels[recipient],
            "type": 1,
            "last_message_id": None,
            "recipients": [user],
        }
        return web.json_response(channel)

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        return web.Response(body=data) if data is not None else web.Response(status=404)


def _unauthorised() -> web.Response:
    return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
