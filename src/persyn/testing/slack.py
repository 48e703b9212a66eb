"""A wire-faithful fake of Slack for the Slack adapter's tests (Slack cannot run here), served
over real HTTP and WebSocket on loopback (uvicorn). The adapter talks to it through the
official `slack-sdk` clients with only the Web API's base URL changed.

Shapes, each from Slack's public documentation:
- The Web API (api.slack.com/web, "Using the Slack Web API"): `POST|GET {base}/{method}`, the token
  as `Authorization: Bearer`, arguments as JSON, form or query; every answer is HTTP 200 with
  `{"ok": true, ...}` or `{"ok": false, "error": "invalid_auth"}`; a rate-limited call is HTTP
  429 with a `Retry-After` header in seconds ("Rate limits" page).
- `auth.test` (api.slack.com/methods/auth.test): `url`, `team`, `user`, `team_id`, `user_id`,
  `bot_id`. `users.info` (api.slack.com/methods/users.info): `user` with `id`, `team_id`,
  `name`, `real_name`, `is_bot`, `profile.display_name`. `chat.postMessage`
  (api.slack.com/methods/chat.postMessage): `channel`, `text`, `thread_ts`; answers `channel`,
  `ts`, `message`; text over 40,000 characters is `msg_too_long`. `chat.update`
  (api.slack.com/methods/chat.update): `channel`, `ts`, `text`. `conversations.open`
  (api.slack.com/methods/conversations.open): `users` (one user id: a DM) answers `channel` with
  its `id`, the same IM each time; an unknown user is `user_not_found`.
- Socket Mode (api.slack.com/apis/socket-mode): `apps.connections.open` with the app-level
  token (`xapp-`) answers a `wss://` URL; the server's first frame is
  `{"type": "hello", "num_connections": 1, "connection_info": {"app_id": ...}}`; events come as
  `{"envelope_id", "type": "events_api", "payload": <event_callback>, "accepts_response_payload",
  "retry_attempt", "retry_reason"}` and are acknowledged by sending `{"envelope_id": ...}` back;
  an envelope not acknowledged is sent again (`retry_attempt` + 1) on the next connection;
  `{"type": "disconnect", "reason": "refresh_requested"}` asks the client to reconnect.
- The Events API over HTTP (api.slack.com/apis/events-api, "Verifying requests from Slack"):
  a signed POST (`X-Slack-Request-Timestamp`, `X-Slack-Signature` = `v0=` HMAC-SHA256 of
  `v0:{timestamp}:{body}` with the signing secret), `url_verification` with a `challenge`,
  redeliveries carrying `X-Slack-Retry-Num` and `X-Slack-Retry-Reason`.
- Files (api.slack.com/types/file): a message's `files` items with `id`, `name`, `mimetype`,
  `size`, `url_private`, downloaded with the bot token as `Authorization: Bearer`.
- The message event (api.slack.com/events/message): `type`, `channel`, `channel_type`
  (`im`, `channel`, `group`, `mpim`), `user`, `text`, `ts`, `thread_ts`, `bot_id`, `subtype`
  (`bot_message`, `message_changed` with `message`, `message_deleted` with `deleted_ts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

__all__ = ["FakeSlack", "SlackUser", "dm_channel", "sign"]

BOT_TOKEN = "xoxb-test-bot-token"
APP_TOKEN = "xapp-test-app-token"
SIGNING_SECRET = "test-signing-secret"
TEAM = "T0TEAM"
BOT_USER = "U0BOT"
BOT_ID = "B0BOT"
APP_ID = "A0APP"
_TEXT_LIMIT = 40_000


@dataclass(frozen=True)
class SlackUser:
    id: str
    name: str
    display_name: str = ""
    is_bot: bool = False


def dm_channel(user: str) -> str:
    """The IM channel of the bot's DM with `user` (one per user, the same every time)."""
    return f"D{user[1:]}"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Slack's request signature: `v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass
class FakeSlack:
    """One workspace with the app installed. `throttle` calls of `chat.postMessage` answer 429
    first; `stop`/`start` take the whole server away and back (same port) mid-test."""

    throttle: int = 0
    retry_after: int = 1
    users: dict[str, SlackUser] = field(default_factory=dict[str, SlackUser])
    posted: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    updated: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    calls: list[str] = field(default_factory=list[str])
    files: dict[str, bytes] = field(default_factory=dict[str, bytes])
    acked: list[str] = field(default_factory=list[str])
    opened: list[str] = field(default_factory=list[str])  # users whose DM conversations.open opened
    connections: int = 0  # WebSocket connections accepted so far
    slow_lookups: list[float] = field(default_factory=list[float])  # users.info: the next calls' delays
    port: int = 0
    _unacked: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    _sockets: list[WebSocket] = field(default_factory=list[WebSocket])
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None
    _ts: int = 0
    _envelopes: int = 0

    # the server ----------------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    async def start(self) -> None:
        if not self.port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        app = Starlette(
            routes=[
                Route("/api/{method}", self._web_api, methods=["GET", "POST"]),
                Route("/files/{file_id}/{name}", self._download, methods=["GET"]),
                WebSocketRoute("/link/", self._socket),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._task = asyncio.ensure_future(self._server.serve())
        deadline = time.monotonic() + 30
        while not self._server.started:
            if self._task.done() or time.monotonic() > deadline:
                raise RuntimeError(f"the fake Slack did not listen on port {self.port}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """The outage: every Socket Mode connection closed, the port no longer listening."""
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=1001)
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None

    async def refresh(self) -> None:
        """Ask every Socket Mode client to reconnect, as Slack does every few hours."""
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.send_text(json.dumps({"type": "disconnect", "reason": "refresh_requested"}))

    # what a person does ----------------------------------------------------------------------
    def next_ts(self) -> str:
        self._ts += 1
        return f"{1_765_000_000 + self._ts}.{self._ts:06d}"

    def message_event(
        self, text: str, *, user: str, channel: str, channel_type: str = "channel", **extra: Any
    ) -> dict[str, Any]:
        """An `event_callback` carrying a message event, as both delivery ways wrap it."""
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "channel_type": channel_type,
            "user": user,
            "text": text,
            "ts": self.next_ts(),
            "team": TEAM,
            **extra,
        }
        return self.callback(event)

    def callback(self, event: dict[str, Any]) -> dict[str, Any]:
        self._envelopes += 1
        return {
            "token": "verification-token-unused",
            "team_id": TEAM,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{self._envelopes:08d}",
            "event_time": int(time.time()),
        }

    async def push(self, payload: dict[str, Any]) -> str:
        """Send `payload` over Socket Mode as an `events_api` envelope (kept until acked)."""
        envelope_id = f"env-{len(self._unacked) + len(self.acked) + 1}-{payload.get('event_id')}"
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "payload": payload,
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        self._unacked[envelope_id] = envelope
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.send_text(json.dumps(envelope))
                break
        return envelope_id

    async def deliver_http(
        self,
        url: str,
        payload: dict[str, Any],
        *,
        secret: str = SIGNING_SECRET,
        timestamp: int | None = None,
        retry: int = 0,
        signed: bool = True,
    ) -> httpx.Response:
        """POST `payload` to an Events API request URL as Slack does (signed; a retry numbered)."""
        body = json.dumps(payload).encode()
        at = int(time.time()) if timestamp is None else timestamp
        headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": str(at)}
        if signed:
            headers["X-Slack-Signature"] = sign(secret, at, body)
        if retry:
            headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.post(url, content=body, headers=headers)

    def file(self, file_id: str, name: str, data: bytes, mimetype: str) -> dict[str, Any]:
        """A file object for a message's `files`, its bytes served at `url_private`."""
        self.files[file_id] = data
        return {
            "id": file_id,
            "name": name,
            "mimetype": mimetype,
            "size": len(data),
            "url_private": f"http://127.0.0.1:{self.port}/files/{file_id}/{name}",
        }

    # the Web API ---------------------------------------------------------------------------
    async def _web_api(self, request: Request) -> Response:
        method = request.path_params["method"]
        self.calls.append(method)
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        args: dict[str, Any] = dict(request.query_params)
        raw = await request.body()
        if raw and request.headers.get("content-type", "").startswith("application/json"):
            args |= json.loads(raw)
        elif raw:
            args |= dict(await request.form())
        args.setdefault("token", token)
        wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if args["token"] != wanted:
            return _error(
                "not_allowed_token_type" if args["token"] in (APP_TOKEN, BOT_TOKEN) else "invalid_auth"
            )
        if method == "auth.test":
            return _ok(
                url="https://test.slack.com/",
                team="Test",
                user="ada",
                team_id=TEAM,
                user_id=BOT_USER,
                bot_id=BOT_ID,
            )
        if method == "apps.connections.open":
            return _ok(url=f"ws://127.0.0.1:{self.port}/link/")
        if method == "users.info":
            if self.slow_lookups:
                await asyncio.sleep(self.slow_lookups.pop(0))
            user = self.users.get(str(args.get("user")))
            if user is None:
                return _error("user_not_found")
            return _ok(
                user={
                    "id": user.id,
                    "team_id": TEAM,
                    "name": user.name,
                    "real_name": user.display_name or user.name,
                    "is_bot": user.is_bot,
                    "profile": {"display_name": user.display_name},
                }
            )
        if method == "conversations.open":
            users = [u for u in str(args.get("users") or "").split(",") if u]
            if len(users) != 1 or users[0] not in self.users:
                return _error("user_not_found")
            self.opened.append(users[0])
            return _ok(channel={"id": dm_channel(users[0])})
        if method in ("chat.postMessage", "chat.update"):
            return self._chat(method, args)
        return _error("unknown_method")

    def _chat(self, method: str, args: dict[str, Any]) -> Response:
        if method == "chat.postMessage" and self.throttle > 0:
            self.throttle -= 1
            return JSONResponse(
                {"ok": False, "error": "ratelimited"}, 429, headers={"Retry-After": str(self.retry_after)}
            )
        text = str(args.get("text") or "")
        if not args.get("channel"):
            return _error("channel_not_found")
        if not text.strip():
            return _error("no_text")
        if len(text) > _TEXT_LIMIT:
            return _error("msg_too_long")
        if method == "chat.update":
            self.updated.append(args)
            return _ok(channel=args["channel"], ts=args.get("ts"), text=text)
        self.posted.append(args)
        ts = self.next_ts()
        message = {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "text": text, "ts": ts}
        return _ok(channel=args["channel"], ts=ts, message=message)

    async def _download(self, request: Request) -> Response:
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if token != BOT_TOKEN:  # Slack answers a login page, not the file
            return Response("<html>sign in</html>", media_type="text/html")
        data = self.files.get(request.path_params["file_id"])
        if data is None:
            return Response(status_code=404)
        return Response(data, media_type="application/octet-stream")

    # Socket Mode --------------------------------------------------------------------------
    async def _socket(self, ws: WebSocket) -> None:
        await ws.accept()
        self.connections += 1
        self._sockets.append(ws)
        try:
            hello = {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
                "connection_info": {"app_id": APP_ID},
            }
            await ws.send_text(json.dumps(hello))
            for envelope in list(self._unacked.values()):  # not acknowledged: sent again
                envelope["retry_attempt"] += 1
                envelope["retry_reason"] = "timeout"
                await ws.send_text(json.dumps(envelope))
            while True:
                frame = json.loads(await ws.receive_text())
                envelope_id = frame.get("envelope_id") if isinstance(frame, dict) else None
                if isinstance(envelope_id, str) and self._unacked.pop(envelope_id, None) is not None:
                    self.acked.append(envelope_id)
        except (WebSocketDisconnect, RuntimeError, ValueError):
            pass
        finally:
            self._sockets.remove(ws)


def _ok(**fields: Any) -> JSONResponse:
    return JSONResponse({"ok": True, **fields})


def _error(error: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": error})
