"""The chat page's "talk" control (issue 36 item 2): a WebSocket at `/v1/voice` that makes a
browser one more transport of the live voice session (`channels.voice.Call` over a
`BrowserOutlet`), when `[voice] enabled`.

The protocol, page to server:
- first, within `_HELLO_SECONDS`: `{"type": "hello", "key": "psk-…", "agent": "Ada"}` — the same
  web keys as the API, sent in the first message since a browser cannot set headers on a
  WebSocket and a key in the URL's query would reach logs;
- binary messages: the microphone, 16 kHz mono 16-bit little-endian PCM, at most
  `MAX_FRAME_BYTES` each and `MAX_FRAMES_PER_SECOND` a second (counted from the session's start, with
  `_BURST_SECONDS` of slack);
- `{"type": "played", "name": …}`: the audio before that mark has played; `{"type": "bye"}`.

Server to page: `{"type": "ready", "session": …}`; binary messages (one WAV per piece of
speech); `{"type": "saying", "text"}`, `{"type": "mark", "name"}`, `{"type": "clear"}` (stop
playback: the person spoke over the agent), `{"type": "heard", "text"}` (what the agent heard),
`{"type": "cut_off", "said"}`; `{"type": "error", "message"}` before a refusal closes the socket
(1008 for a bad key or a flood, 1009 for a frame too large — uvicorn refuses one over 1 MiB
before reading it: `web/server.py`).

The caller is the key's web identity, the same person as its typed chat; each session is a call
of its own (its channel `web-<ULID>`, a conversation of its own), ended by `[voice]
max_call_minutes` at the latest."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, cast

import numpy as np
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from persyn.channels.voice.channel import Call, shared_phone
from persyn.channels.voice.outlet import BrowserOutlet
from persyn.core.events import Speaker
from persyn.core.ids import new_id
from persyn.runtime.web_keys import WebKey, web_identity, web_speaker_name
from persyn.web.context import WebContext

__all__ = ["MAX_FRAMES_PER_SECOND", "MAX_FRAME_BYTES", "VOICE_PATH", "voice_route"]

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/voice"
MAX_FRAME_BYTES = 32_000  # one second of 16 kHz 16-bit audio in one message
MAX_FRAMES_PER_SECOND = 100  # the page sends 20 ms frames: 50 a second
_HELLO_SECONDS = 10.0
_BURST_SECONDS = 2.0  # how far ahead of real time a page may send
_MALFORMED_LIMIT = 50
_POLICY = 1008
_TOO_BIG = 1009


class _Refused(Exception):
    def __init__(self, message: str, code: int = _POLICY) -> None:
        super().__init__(message)
        self.code = code


def voice_route(context: WebContext) -> WebSocketRoute:
    async def endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            key = await _hello(context, websocket)
            await _session(context, websocket, key)
        except _Refused as exc:
            with contextlib.suppress(Exception):
                await websocket.send_text(json.dumps({"type": "error", "message": str(exc)}))
                await websocket.close(code=exc.code, reason=str(exc)[:120])
        except (WebSocketDisconnect, RuntimeError):
            return

    return WebSocketRoute(VOICE_PATH, endpoint)


async def _hello(context: WebContext, websocket: WebSocket) -> WebKey:
    if not context.settings.voice.enabled:
        raise _Refused("voice is off here: [voice] enabled = false")
    try:
        raw = await asyncio.wait_for(websocket.receive(), _HELLO_SECONDS)
    except TimeoutError as exc:
        raise _Refused(f"no hello with a key within {_HELLO_SECONDS:g} s") from exc
    text = raw.get("text")
    message = _json(text) if isinstance(text, str) else None
    if message is None or message.get("type") != "hello":
        raise _Refused('the first message must be {"type": "hello", "key": "psk-..."}')
    secret = message.get("key")
    key = await context.authenticate(secret.strip()) if isinstance(secret, str) and secret.strip() else None
    if key is None:
        raise _Refused("an unknown or revoked API key (or none) was sent in the hello")
    phone = shared_phone(context.settings, context.runtime)
    wanted = message.get("agent")
    if isinstance(wanted, str) and wanted.strip().lower() not in {
        phone.agent.name.lower(),
        phone.agent.id.lower(),
    }:
        raise _Refused(f"voice here is {phone.agent.name}'s, not {wanted!r}'s ([voice] agent)")
    return key


async def _session(context: WebContext, websocket: WebSocket, key: WebKey) -> None:
    phone = shared_phone(context.settings, context.runtime)
    await phone.attach()
    identity = web_identity(key.id)
    speaker = Speaker(
        service=identity.service,
        channel=identity.channel,
        speaker_id=identity.speaker_id,
        display_name=web_speaker_name(key),
    )
    await context.runtime.resolve_speaker(phone.agent.id, speaker)
    sid = f"web-{new_id(context.runtime.clock.now())}"
    call = phone.open_call(
        sid, "", speaker.display_name, websocket, outlet=BrowserOutlet(websocket), identity=speaker
    )
    try:
        await call.open()
        await websocket.send_text(json.dumps({"type": "ready", "session": sid, "agent": phone.agent.name}))
        async with asyncio.timeout(phone.config.max_call_minutes * 60):
            await _listen(websocket, call)
    except TimeoutError as exc:
        raise _Refused("the session reached [voice] max_call_minutes and was ended", 1000) from exc
    finally:
        await phone.close_call(sid)


async def _listen(websocket: WebSocket, call: Call) -> None:
    """Read the page until it says bye or goes; a flood, an oversized frame or too much junk
    ends the session with the reason."""
    loop = asyncio.get_running_loop()
    opened, frames, audio, malformed = loop.time(), 0, 0, 0
    while True:
        raw = await websocket.receive()
        if raw["type"] == "websocket.disconnect":
            return
        # Counted since the session opened, so a backlog read late is not mistaken for a burst.
        allowed = loop.time() - opened + _BURST_SECONDS
        frames += 1
        if frames > MAX_FRAMES_PER_SECOND * allowed:
            raise _Refused(f"more than {MAX_FRAMES_PER_SECOND} messages a second")
        data = raw.get("bytes")
        if isinstance(data, bytes):
            if len(data) > MAX_FRAME_BYTES:
                raise _Refused(f"a frame of {len(data)} bytes is over {MAX_FRAME_BYTES}", _TOO_BIG)
            audio += len(data)
            if audio > MAX_FRAME_BYTES * allowed:
                raise _Refused("audio faster than real time (16 kHz 16-bit mono is 32,000 bytes a second)")
            if len(data) % 2:
                malformed += 1
            else:
                samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
                await call.hear_samples(samples)
        else:
            text = raw.get("text")
            message = _json(text) if isinstance(text, str) else None
            kind = message.get("type") if message is not None else None
            if kind == "bye":
                return
            if kind == "played" and message is not None and isinstance(message.get("name"), str):
                call.heard_mark(message["name"])
            else:
                malformed += 1
        if malformed > _MALFORMED_LIMIT:
            raise _Refused(f"more than {_MALFORMED_LIMIT} messages of no known shape")


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return cast(dict[str, Any], value) if isinstance(value, dict) else None
