"""The web routes of the telephone channel (`ChannelPlugin.web_routes`), as Twilio calls them:

- `POST /voice/twilio/incoming`: the incoming-call webhook (a signed form: `CallSid`, `From`,
  `To`, `AccountSid`, …). A caller the inbound filter admits gets TwiML connecting a Media
  Stream to `/voice/twilio/stream` (the caller and call sid as `<Parameter>`s); any other is
  told politely that the agent takes no calls from them, or rejected (`[voice] reject`).
- `POST /voice/twilio/outbound?call=TOKEN`: the answer webhook of a call the agent placed
  (`PhoneChannel.place_call`), signed like the other: TwiML connecting the stream with the
  direction (`outbound`), the callee, the purpose and the placement's token as `<Parameter>`s;
  a token that names no placement of this call gets `<Hangup/>`.
- `/voice/twilio/stream`: the Media Streams WebSocket (twilio.com/docs/voice/media-streams/
  websocket-messages): `connected`, `start` (`callSid`, `streamSid`, `customParameters`),
  `media` (base64 8 kHz μ-law), `mark` (the echo of one the call sent: what was heard), `stop`. The upgrade must carry a valid signature over
  the stream URL. A message that is not JSON or not of these shapes is skipped; a stream with no
  `start` within `_START_SECONDS` is closed.

Both are signed with the account's auth token (`TWILIO_AUTH_TOKEN`); unsigned or badly signed
requests get 403, and nothing is done for them.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import json
import logging
import os
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from persyn.channels.voice.channel import OUTBOUND_PATH, Call, PhoneChannel, shared_phone
from persyn.channels.voice.twilio import TOKEN_VARIABLE, connect_twiml, reject_twiml, say_twiml, signature_ok
from persyn.core.config import Settings
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import BodyRefused, capped_body

__all__ = ["INCOMING_PATH", "OUTBOUND_PATH", "STREAM_PATH", "TOKEN_VARIABLE", "voice_routes"]

log = logging.getLogger(__name__)

INCOMING_PATH = "/voice/twilio/incoming"
STREAM_PATH = "/voice/twilio/stream"
_START_SECONDS = 10.0
_MALFORMED_LIMIT = 50  # messages of no known shape before the stream is dropped
_XML = "application/xml"
_MAX_FIELDS = 200  # Twilio's call webhook sends a few dozen
_HANGUP = '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>'


def _stream_url(public_url: str) -> str:
    scheme, _, rest = public_url.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{STREAM_PATH}"


def voice_routes(
    settings: Settings, api: RuntimeAPI, channel: PhoneChannel | None = None
) -> Sequence[BaseRoute]:
    config = settings.voice
    public = config.twilio.public_url
    state: dict[str, PhoneChannel] = {} if channel is None else {"channel": channel}
    attaching: list[asyncio.Task[None]] = []  # held so the task is not collected

    def phone() -> PhoneChannel:
        if "channel" not in state:
            state["channel"] = shared_phone(settings, api)
        return state["channel"]

    if config.twilio.from_number:
        # Calls the agent places need the line connected from the start, not on the first call
        # in; built outside an event loop, it connects on the first request instead.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            attaching.append(asyncio.ensure_future(phone().attach()))

    def token() -> str:
        return os.environ.get(TOKEN_VARIABLE, "")

    async def signed(request: Request) -> dict[str, str] | Response:
        """The webhook's form, or the 403 of a request Twilio did not sign for this account."""
        try:  # never `request.form()`: it reads a stranger's body however large
            body = await capped_body(
                request,
                settings.web.max_body_bytes,
                seconds=settings.web.request_timeout_seconds,
                setting="[web] max_body_bytes",
            )
        except BodyRefused as exc:
            log.warning("phone: refused a call webhook: %s", exc.reason)
            return PlainTextResponse(exc.reason, status_code=exc.status)
        try:
            params = dict(parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=_MAX_FIELDS))
        except (UnicodeDecodeError, ValueError):
            return PlainTextResponse("the body is not a form (application/x-www-form-urlencoded)", 400)
        url = public + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if not signature_ok(token(), url, params, request.headers.get("x-twilio-signature")):
            return PlainTextResponse("bad or missing X-Twilio-Signature", status_code=403)
        if config.twilio.account_sid and params.get("AccountSid") != config.twilio.account_sid:
            return PlainTextResponse("not this account's call", status_code=403)
        return params

    async def outbound(request: Request) -> Response:
        params = await signed(request)
        if isinstance(params, Response):
            return params
        channel = phone()
        await channel.attach()
        placement = channel.answered(request.query_params.get("call", ""), params.get("CallSid", ""))
        if placement is None:
            log.info("phone: an answer webhook for a call not placed here was hung up")
            return Response(_HANGUP, media_type=_XML)
        parameters = {
            "direction": "outbound",
            "callee": placement.number,
            "purpose": placement.purpose,
            "call": request.query_params.get("call", ""),
            "callSid": params.get("CallSid", ""),
        }
        return Response(connect_twiml(_stream_url(public), parameters), media_type=_XML)

    async def incoming(request: Request) -> Response:
        params = await signed(request)
        if isinstance(params, Response):
            return params
        channel = phone()
        await channel.attach()
        caller = params.get("From", "")
        if not caller or not await channel.answers(caller):
            log.info("phone: a call from %r was not answered (unknown caller)", caller)
            if config.reject == "ignore":
                return Response(reject_twiml(), media_type=_XML)
            return Response(
                say_twiml(f"Sorry, {channel.agent.name} does not take calls from this number. Goodbye."),
                media_type=_XML,
            )
        parameters = {"caller": caller, "callSid": params.get("CallSid", "")}
        return Response(connect_twiml(_stream_url(public), parameters), media_type=_XML)

    async def stream(websocket: WebSocket) -> None:
        given = websocket.headers.get("x-twilio-signature")
        if not signature_ok(token(), _stream_url(public), None, given):
            await websocket.close(code=1008)  # before accepting: the upgrade is refused (403)
            return
        channel = phone()
        await channel.attach()
        await websocket.accept()
        try:
            async with asyncio.timeout(config.max_call_minutes * 60):
                await _serve(websocket, channel)
        except TimeoutError:
            log.info("phone: a call reached [voice] max_call_minutes and was ended")
        finally:
            with contextlib.suppress(Exception):
                await websocket.close()
            # The call this stream opened, however the stream ended (a timeout cancels `_serve`).
            for sid in [sid for sid, call in channel.calls.items() if call.socket is websocket]:
                await channel.close_call(sid)

    return [
        Route(INCOMING_PATH, incoming, methods=["POST"]),
        Route(OUTBOUND_PATH, outbound, methods=["POST"]),
        WebSocketRoute(STREAM_PATH, stream),
    ]


async def _serve(websocket: WebSocket, channel: PhoneChannel) -> Call | None:
    """Read the stream until `stop` or the line drops; the call it opened (if any)."""
    call: Call | None = None
    malformed = 0
    loop = asyncio.get_running_loop()
    opened = loop.time()
    while True:
        wait = None if call is not None else max(0.1, _START_SECONDS - (loop.time() - opened))
        try:
            raw = await asyncio.wait_for(websocket.receive_text(), wait)
        except TimeoutError:
            log.warning("phone: a stream sent no 'start' within %g s and was closed", _START_SECONDS)
            return call
        except (WebSocketDisconnect, RuntimeError):
            return call
        message = _message(raw)
        kind = message.get("event") if message is not None else None
        if message is None or not isinstance(kind, str):
            malformed += 1
            if malformed > _MALFORMED_LIMIT:
                log.warning("phone: a stream sent %d malformed messages and was closed", malformed)
                return call
            continue
        if kind == "start" and call is None:
            call = await _started(websocket, channel, message)
            if call is None:
                return None
        elif kind == "media" and call is not None:
            payload = _dig(message, "media", "payload")
            if isinstance(payload, str):
                try:
                    await call.hear(payload)
                except (binascii.Error, ValueError):
                    malformed += 1
        elif kind == "mark" and call is not None:
            name = _dig(message, "mark", "name")
            if isinstance(name, str):
                call.heard_mark(name)
        elif kind == "stop":
            return call


async def _started(websocket: WebSocket, channel: PhoneChannel, message: dict[str, Any]) -> Call | None:
    sid, stream_sid = _dig(message, "start", "callSid"), _dig(message, "start", "streamSid")
    if not (isinstance(sid, str) and sid and isinstance(stream_sid, str)) or sid in channel.calls:
        log.warning("phone: a 'start' without callSid or streamSid, or of a call already on, was refused")
        return None
    if _dig(message, "start", "customParameters", "direction") == "outbound":
        # A call the agent placed: only its own placement (by the webhook's token) opens it.
        placement = channel.answered(str(_dig(message, "start", "customParameters", "call")), sid)
        if placement is None or placement.sid != sid:
            log.warning("phone: an outbound stream naming no call placed here was refused")
            return None
        channel.placed.pop(str(_dig(message, "start", "customParameters", "call")), None)
        call = channel.open_call(sid, stream_sid, placement.number, websocket, placement=placement)
        await call.cue()
        return call
    caller = _dig(message, "start", "customParameters", "caller")
    if not isinstance(caller, str) or not await channel.answers(caller):
        log.warning("phone: a 'start' without the caller, or from a caller not answered, was refused")
        return None
    call = channel.open_call(sid, stream_sid, caller, websocket)
    await call.cue()
    return call


def _message(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = cast(dict[str, Any], value).get(key)
    return value
