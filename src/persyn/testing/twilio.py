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
- The REST API's calls (`TwilioCloud`, a Starlette app on loopback; twilio.com/docs/voice/api/
  call-resource): `POST /2010-04-01/Accounts/{AccountSid}/Calls.json` with HTTP basic auth
  (AccountSid:AuthToken; twilio.com/docs/usage/requests-to-twilio) and the form `To`, `From`, `Url`
  or `Twiml`, `Method`, `StatusCallback`; it answers 201 with the call resource (`sid`,
  `account_sid`, `to`, `from`, `status` "queued", `direction` "outbound-api", `uri`, …). Refusals
  are Twilio's JSON errors (twilio.com/docs/usage/twilios-response): 401 code 20003 for bad
  credentials, 404 code 20404 for another account's path or an unknown call, 400 code 21211 for a
  `To` that is not a phone number (twilio.com/docs/errors/21211), 21212 for a `From` that is not
  one, 21210 for a `From` the account does not own (twilio.com/docs/errors/21210), 21205 when
  neither `Url` nor `Twiml` is given (twilio.com/docs/errors/21205). The callee then "answers":
  the `Url` is fetched (POST, the form `CallSid`, `AccountSid`, `From`, `To`, `CallStatus`
  "in-progress", `Direction` "outbound-api", signed as a webhook), and given `<Connect><Stream>` a
  `MediaStreamCaller` opens the stream as the callee. `POST …/Calls/{CallSid}.json` with
  `Status=completed` hangs up (twilio.com/docs/voice/tutorials/how-to-modify-calls-in-progress):
  the stream gets `stop` and the call is `completed`. `GET /2010-04-01/Accounts/{AccountSid}.json`
  answers the account resource (twilio.com/docs/iam/api/account), under the same auth.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import secrets
import socket
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from persyn.channels.voice.twilio import signature
from persyn.testing.harness import until

__all__ = ["Answer", "MediaStreamCaller", "PlacedCall", "TwilioCloud", "ring"]

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
    return sid, _read_twiml(200, response.text)


def _read_twiml(status: int, text: str) -> Answer:
    root = ElementTree.fromstring(text)
    stream = root.find("./Connect/Stream")
    if stream is not None:
        parameters = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
        return Answer(status, stream_url=stream.get("url"), parameters=parameters)
    say = root.find("Say")
    return Answer(
        status, said=say.text if say is not None else None, rejected=root.find("Reject") is not None
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


_E164 = re.compile(r"\+[1-9]\d{1,14}")
_API = "/2010-04-01/Accounts/{account}"


@dataclass
class PlacedCall:
    """A call placed through the fake's REST API, and what became of it."""

    sid: str
    to: str
    from_: str
    url: str | None
    twiml: str | None
    status_callback: str | None
    status: str = "queued"
    answer: Answer | None = None  # what the answer webhook said
    callee: MediaStreamCaller | None = None  # the stream, from the callee's side
    statuses: list[str] = field(default_factory=lambda: [])  # every status it went through

    def resource(self, account_sid: str) -> dict[str, Any]:
        """The call resource's JSON (twilio.com/docs/voice/api/call-resource#call-properties)."""
        uri = f"{_API.format(account=account_sid)}/Calls/{self.sid}.json"
        return {
            "sid": self.sid,
            "account_sid": account_sid,
            "to": self.to,
            "to_formatted": self.to,
            "from": self.from_,
            "from_formatted": self.from_,
            "status": self.status,
            "direction": "outbound-api",
            "api_version": "2010-04-01",
            "parent_call_sid": None,
            "phone_number_sid": None,
            "answered_by": None,
            "caller_name": None,
            "start_time": None,
            "end_time": None,
            "duration": None,
            "price": None,
            "price_unit": "USD",
            "uri": uri,
            "subresource_uris": {"recordings": uri.replace(".json", "/Recordings.json")},
        }


def _error(status: int, code: int, message: str) -> JSONResponse:
    """Twilio's error body (twilio.com/docs/usage/twilios-response#response-formats-exceptions)."""
    body = {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return JSONResponse(body, status_code=status)


@dataclass
class TwilioCloud:
    """Twilio's REST side of calls, served on loopback (`async with TwilioCloud(...) as cloud`;
    `cloud.url` is the `[voice.twilio] api_url`). `numbers`: the account's own numbers (a `From`
    outside them is refused); `answer`: whether callees pick up. `calls` holds every call placed,
    `requests` every request's method, path and status."""

    account_sid: str
    token: str
    numbers: tuple[str, ...] = ("+15550009999",)
    answer: bool = True
    url: str = ""
    calls: dict[str, PlacedCall] = field(default_factory=dict[str, PlacedCall])
    requests: list[tuple[str, str, int]] = field(default_factory=lambda: [])
    _server: uvicorn.Server | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=lambda: [])

    async def __aenter__(self) -> TwilioCloud:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        base = "/2010-04-01/Accounts/{account}"
        app = Starlette(
            routes=[
                Route(base + ".json", self._account, methods=["GET"]),
                Route(base + "/Calls.json", self._create, methods=["POST"]),
                Route(base + "/Calls/{sid}.json", self._update, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._tasks.append(asyncio.ensure_future(self._server.serve()))
        server = self._server
        await until(lambda: server.started, "the fake Twilio API to listen")
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for call in self.calls.values():
            if call.callee is not None:
                await call.callee.drop()
        if self._server is not None:
            self._server.should_exit = True
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 30)

    def _authorized(self, request: Request) -> JSONResponse | None:
        """401 for missing or wrong basic credentials, 404 for another account's path."""
        given = request.headers.get("authorization", "")
        scheme, _, encoded = given.partition(" ")
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            user = password = ""
        if scheme.lower() != "basic" or user != self.account_sid or password != self.token:
            return _error(401, 20003, "Authenticate")
        if request.path_params["account"] != self.account_sid:
            return _error(404, 20404, f"The requested resource {request.url.path} was not found")
        return None

    async def _account(self, request: Request) -> Response:
        """The account resource (twilio.com/docs/iam/api/account#account-properties)."""
        response = self._authorized(request) or JSONResponse(
            {"sid": self.account_sid, "status": "active", "type": "Full", "friendly_name": "fake"}
        )
        self.requests.append(("GET", request.url.path, response.status_code))
        return response

    async def _create(self, request: Request) -> Response:
        response = self._authorized(request) or await self._place(request)
        self.requests.append(("POST", request.url.path, response.status_code))
        return response

    async def _place(self, request: Request) -> Response:
        form = {key: str(value) for key, value in (await request.form()).items()}
        to, from_ = form.get("To", ""), form.get("From", "")
        if not _E164.fullmatch(to):
            return _error(400, 21211, f"Invalid 'To' Phone Number: {to}")
        if not _E164.fullmatch(from_):
            return _error(400, 21212, f"Invalid From Number (caller ID): {from_}")
        if from_ not in self.numbers:
            return _error(
                400,
                21210,
                f"The source phone number provided, {from_}, is not yet verified for your account.",
            )
        if not form.get("Url") and not form.get("Twiml"):
            return _error(400, 21205, "Url parameter is required.")
        call = PlacedCall(
            _sid("CA"), to, from_, form.get("Url"), form.get("Twiml"), form.get("StatusCallback")
        )
        call.statuses.append(call.status)
        self.calls[call.sid] = call
        if self.answer:
            self._tasks.append(asyncio.ensure_future(self._ring(call)))
        return JSONResponse(call.resource(self.account_sid), status_code=201)

    async def _update(self, request: Request) -> Response:
        refused = self._authorized(request)
        call = self.calls.get(request.path_params["sid"])
        if refused is None and call is None:
            refused = _error(404, 20404, f"The requested resource {request.url.path} was not found")
        if refused is not None or call is None:
            self.requests.append(("POST", request.url.path, refused.status_code if refused else 404))
            return refused or _error(404, 20404, "not found")
        form = {key: str(value) for key, value in (await request.form()).items()}
        self.requests.append(("POST", request.url.path, 200))
        if form.get("Status") == "completed":
            await self._finish(call)
        return JSONResponse(call.resource(self.account_sid))

    async def _finish(self, call: PlacedCall) -> None:
        if call.callee is not None:
            await call.callee.hang_up()
        self._status(call, "completed")

    def _status(self, call: PlacedCall, status: str) -> None:
        call.status = status
        call.statuses.append(status)

    async def _ring(self, call: PlacedCall) -> None:
        """The callee picks up: the TwiML is fetched (or given) and the stream opened."""
        self._status(call, "ringing")
        self._status(call, "in-progress")
        if call.url is not None:
            params = {
                "CallSid": call.sid,
                "AccountSid": self.account_sid,
                "From": call.from_,
                "To": call.to,
                "CallStatus": "in-progress",
                "Direction": "outbound-api",
                "ApiVersion": "2010-04-01",
            }
            headers = {"X-Twilio-Signature": signature(self.token, call.url, params)}
            async with httpx.AsyncClient(timeout=30) as client:
                response = await client.post(call.url, data=params, headers=headers)
            if response.status_code != 200:
                call.answer = Answer(response.status_code)
                self._status(call, "failed")
                return
            twiml = response.text
        else:
            twiml = call.twiml or "<Response/>"
        call.answer = _read_twiml(200, twiml)
        if call.answer.stream_url is None:
            self._status(call, "completed")
            return
        callee = MediaStreamCaller(call.sid, account_sid=self.account_sid)
        await callee.connect(call.answer.stream_url, self.token)
        await callee.start(call.answer.parameters)
        call.callee = callee
