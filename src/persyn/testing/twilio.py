"""A wire-faithful fake of Twilio's side of a phone call, for tests (Twilio cannot run here): it
does what Twilio does to the agent's server, with the shapes of Twilio's public documentation.

- The incoming-call webhook (twilio.com/docs/voice/twiml#request-parameters): a form POST with
  `CallSid`, `AccountSid`, `From`, `To`, `CallStatus`, `Direction`, signed with
  `X-Twilio-Signature` (twilio.com/docs/usage/security#validating-requests: Base64 HMAC-SHA1
  with the auth token over the URL followed by the sorted parameters' names and values).
- The TwiML answer read as Twilio reads it (twilio.com/docs/voice/twiml/stream): the
  `<Connect><Stream url=…>` and its `<Parameter>`s, or `<Say>`/`<Hangup/>`/`<Reject/>`.
- A Media Streams caller (twilio.com/docs/voice/media-streams/websocket-messages): connects to
  the stream URL with the upgrade signed over that URL, sends `connected`, `start` (with
  `accountSid`, `callSid`, `streamSid`, `tracks`, `mediaFormat` audio/x-mulaw 8000 Hz mono and
  the `<Parameter>`s as `customParameters`), then `media` messages of 20 ms (160 bytes) of
  base64 μ-law with `sequenceNumber`, `chunk` and `timestamp` (ms); collects the agent's
  `media` and answers each `mark` when it is reached, as Twilio does once the audio before it
  has played (`realtime`: the audio plays at its own pace, 20 ms a frame, so a mark waits for
  it; otherwise playback is instant); on `clear` drops the audio not yet played and answers the
  marks still pending at once, as the docs' `clear` section says Twilio does; hangs up with
  `stop`, or drops the connection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets

from persyn.channels.voice.twilio import signature

__all__ = ["Answer", "MediaStreamCaller", "ring"]

_FRAME = 160


def _sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


@dataclass(frozen=True)
class Answer:
    """What the webhook answered: the stream to connect (url, parameters), or what Twilio would
    do instead (`said`: `<Say>` text; `rejected`)."""

    status: int
    stream_url: str | None = None
    parameters: dict[str, str] = field(default_factory=dict[str, str])
    said: str | None = None
    rejected: bool = False


async def ring(
    server: str,
    public_url: str,
    token: str,
    *,
    caller: str,
    called: str = "+15550009999",
    account_sid: str = "AC" + "0" * 32,
    call_sid: str | None = None,
    sign: bool = True,
) -> tuple[str, Answer]:
    """An incoming call's webhook, POSTed to `server` as Twilio would to `public_url`: the call
    sid and what the TwiML says."""
    sid = call_sid or _sid("CA")
    params = {
        "CallSid": sid,
        "AccountSid": account_sid,
        "From": caller,
        "To": called,
        "CallStatus": "ringing",
        "Direction": "inbound",
        "ApiVersion": "2010-04-01",
    }
    path = "/voice/twilio/incoming"
    headers = {"X-Twilio-Signature": signature(token, public_url + path, params)} if sign else {}
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(server + path, data=params, headers=headers)
    if response.status_code != 200:
        return sid, Answer(response.status_code)
    root = ElementTree.fromstring(response.text)
    stream = root.find("./Connect/Stream")
    if stream is not None:
        parameters = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
        return sid, Answer(200, stream_url=stream.get("url"), parameters=parameters)
    say = root.find("Say")
    return sid, Answer(
        200, said=say.text if say is not None else None, rejected=root.find("Reject") is not None
    )


@dataclass
class MediaStreamCaller:
    """One Media Stream, from Twilio's side. `connect(url, token)` (signing the upgrade unless
    `sign=False`), `start(...)`, `send_audio(mulaw)`, then read `heard` (the agent's audio,
    μ-law, in order) and `marks`; `hang_up()` sends `stop`, `drop()` just closes."""

    call_sid: str
    account_sid: str = "AC" + "0" * 32
    stream_sid: str = field(default_factory=lambda: _sid("MZ"))
    heard: bytearray = field(default_factory=bytearray)
    marks: list[str] = field(default_factory=lambda: [])
    media_messages: int = 0
    media_times: list[float] = field(default_factory=lambda: [])  # monotonic, one per media message
    realtime: bool = False
    clears: int = 0
    _plays_until: float = 0.0  # `realtime`: when the audio received so far will have played
    _pending_marks: list[asyncio.Task[None]] = field(default_factory=lambda: [])
    _socket: Any = None
    _reader: asyncio.Task[None] | None = None
    _sequence: int = 0
    _chunk: int = 0
    _marked: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(
        self, url: str, token: str, *, signed_url: str | None = None, sign: bool = True
    ) -> None:
        headers = {"X-Twilio-Signature": signature(token, signed_url or url)} if sign else {}
        self._socket = await websockets.connect(url, additional_headers=headers, max_size=2**22)
        self._reader = asyncio.ensure_future(self._read())
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})

    async def send(self, message: dict[str, Any]) -> None:
        self._sequence += 1
        await self._socket.send(json.dumps({**message, "sequenceNumber": str(self._sequence)}))

    async def send_raw(self, text: str) -> None:
        await self._socket.send(text)

    async def start(self, parameters: dict[str, str]) -> None:
        await self.send(
            {
                "event": "start",
                "start": {
                    "accountSid": self.account_sid,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": parameters,
                },
                "streamSid": self.stream_sid,
            }
        )

    async def send_audio(self, mulaw: bytes, *, pace: float = 0.0) -> None:
        """`mulaw` as 20 ms media messages (`pace`: seconds between them; 0 = as fast as the
        socket takes them)."""
        for start in range(0, len(mulaw), _FRAME):
            self._chunk += 1
            payload = base64.b64encode(mulaw[start : start + _FRAME]).decode()
            await self.send(
                {
                    "event": "media",
                    "streamSid": self.stream_sid,
                    "media": {
                        "track": "inbound",
                        "chunk": str(self._chunk),
                        "timestamp": str(self._chunk * 20),
                        "payload": payload,
                    },
                }
            )
            if pace:
                await asyncio.sleep(pace)
            elif self._chunk % 25 == 0:
                await asyncio.sleep(0)

    @property
    def played_bytes(self) -> int:
        """`realtime`: how much of `heard` has played by now (all of it otherwise)."""
        if not self.realtime:
            return len(self.heard)
        unplayed = max(0.0, self._plays_until - time.monotonic())
        return max(0, len(self.heard) - int(unplayed * 8000))

    async def send_silence(self, seconds: float) -> None:
        await self.send_audio(b"\xff" * int(8000 * seconds))

    async def wait_marks(self, count: int, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while len(self.marks) < count:
                self._marked.clear()
                await self._marked.wait()

    async def hang_up(self) -> None:
        with contextlib.suppress(Exception):
            await self.send(
                {
                    "event": "stop",
                    "streamSid": self.stream_sid,
                    "stop": {"accountSid": self.account_sid, "callSid": self.call_sid},
                }
            )
        await self.drop()

    async def drop(self) -> None:
        with contextlib.suppress(Exception):
            await self._socket.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            await self._listen()

    async def _listen(self) -> None:
        async for raw in self._socket:
            message = json.loads(raw)
            if message.get("event") == "media":
                self.media_messages += 1
                now = time.monotonic()
                self.media_times.append(now)
                audio = base64.b64decode(message["media"]["payload"])
                self.heard.extend(audio)
                self._plays_until = max(now, self._plays_until) + len(audio) / 8000
            elif message.get("event") == "mark":
                name = message["mark"]["name"]
                # Twilio answers a mark when the audio sent before it has played.
                if self.realtime:
                    wait = max(0.0, self._plays_until - time.monotonic())
                    self._pending_marks.append(asyncio.ensure_future(self._echo(name, wait)))
                else:
                    await self._echo(name, 0.0)
            elif message.get("event") == "clear":
                self.clears += 1
                if self.realtime:  # what has not played is dropped; the marks come back now
                    del self.heard[self.played_bytes :]
                    self._plays_until = time.monotonic()
                    for task in self._pending_marks:
                        task.cancel()
                    self._pending_marks.clear()
                else:
                    self.heard.clear()

    async def _echo(self, name: str, wait: float) -> None:
        try:
            await asyncio.sleep(wait)
        finally:  # a clear cancels the wait: the mark is answered at once
            self.marks.append(name)
            self._marked.set()
            with contextlib.suppress(Exception):
                await self.send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})
