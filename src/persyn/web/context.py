"""What the web API's handlers share: the context (runtime, channel, keys), request parsing
that turns every bad input into a 4xx JSON error naming the field, and the SSE framing.

A key can be revoked while its streams are open, by `persyn web keys revoke` in another
process: every batch of live events is handed to the client only after the store says the
key still works (`deliverable`: one read per batch, however many tokens it holds), and
`WebSurface` ends the streams of revoked keys within `[dispatch] outbox_poll_seconds`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.channels.web.channel import ENDED, SERVICE, Listener, LiveEvent, TurnUsage, WebChannel
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import STORAGE_UNAVAILABLE, InputError, PersynError, StoreError, is_storage_full
from persyn.core.events import Attachment, CompletionMarker, Event, EventKind, Speaker, Upload
from persyn.core.ids import new_id
from persyn.core.messages import lone_surrogate
from persyn.ops.history import SharedStore
from persyn.ops.memory import Encoder, open_encoder
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import BodyRefused, capped_body
from persyn.runtime.web_keys import WebKey, web_identity, web_speaker_name
from persyn.senses.media import MediaRejected

__all__ = [
    "REVOKED",
    "ApiError",
    "Authenticate",
    "Revoked",
    "WebContext",
    "handler",
    "on_console_store",
    "sse",
    "upload_limit",
]

M = TypeVar("M", bound=BaseModel)

Authenticate = Callable[[str], Awaitable[WebKey | None]]
Revoked = Callable[[Collection[str]], Awaitable[set[str]]]  # which of these key ids no longer work
REVOKED = "this API key was revoked"

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An HTTP error with a JSON body in the OpenAI error shape (clients show `message`)."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def response(self) -> JSONResponse:
        # After a 408 the rest of the body may still trickle in: the connection is not reused.
        headers = {"Connection": "close"} if self.status == 408 else None
        return JSONResponse(
            {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}},
            status_code=self.status,
            headers=headers,
        )


@dataclass
class WebContext:
    """What the handlers share: the runtime (as a channel sees it), the channel, the keys."""

    settings: Settings
    runtime: RuntimeAPI
    channel: WebChannel
    usage: TurnUsage
    authenticate: Authenticate
    revoked: Revoked
    flush_usage: Callable[[], object] | None = None
    # The console's one store for this process (opened on first use, closed with the surface).
    console_store: SharedStore | None = None
    _console_encoder: Encoder | None = dataclasses.field(default=None, init=False, repr=False)

    def console_encoder(self) -> Encoder:
        """The recall tester's encoder, one for the process (built on first use)."""
        if self._console_encoder is None:
            self._console_encoder = open_encoder(self.settings)
        return self._console_encoder

    # requests ----------------------------------------------------------------------------
    async def key(self, request: Request) -> WebKey:
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        if not header:
            raise ApiError(
                401,
                "an API key is required: send 'Authorization: Bearer psk-...'",
                kind="authentication_error",
            )
        if scheme.lower() != "bearer" or not secret.strip():
            raise ApiError(
                401, "malformed Authorization header: expected 'Bearer <key>'", kind="authentication_error"
            )
        key = await self.authenticate(secret.strip())
        if key is None:
            raise ApiError(401, "unknown or revoked API key", kind="authentication_error")
        return key

    async def still_valid(self, key: WebKey) -> bool:
        """Whether `key` works now (the store says; it may have been revoked since the request
        began). A store that cannot answer counts as no: nothing is shown unchecked."""
        try:
            return key.id not in await self.revoked([key.id])
        except PersynError:
            return False

    async def deliverable(self, key: WebKey, listener: Listener, first: LiveEvent) -> list[LiveEvent]:
        """`first` and what waits behind it, for the client of `key` — if the key still works.
        If it does not, the listener ends and only its end (`ENDED`) is returned."""
        batch = listener.waiting(first)
        if any(item.type == ENDED for item in batch):
            return [batch[-1]]  # ended already: the end is always last
        if await self.still_valid(key):
            return batch
        self.channel.end_key(key.id, REVOKED)
        listener.end(REVOKED)  # a listener already forgotten by the channel ends too
        return listener.waiting(listener.queue.get_nowait())

    async def operator(self, request: Request) -> WebKey:
        key = await self.key(request)
        if not key.operator:
            raise ApiError(
                403,
                f"key {key.name!r} is not an operator key: the directory is not open to it",
                kind="permission_error",
            )
        return key

    async def body(self, request: Request, model: type[M], *, files: bool = False) -> M:
        """The JSON body as `model`: 413 over the limit, 400 naming the first bad field. A route
        that takes files (`files`) is held to `upload_limit`, every other to `[web] max_body_bytes`."""
        limit = upload_limit(self.settings) if files else self.settings.web.max_body_bytes
        key = "[web] max_upload_bytes" if files else "[web] max_body_bytes"
        try:
            raw = await capped_body(
                request, limit, seconds=self.settings.web.request_timeout_seconds, setting=key
            )
        except BodyRefused as exc:
            kind = "timeout_error" if exc.status == 408 else "invalid_request_error"
            raise ApiError(exc.status, exc.reason, param=exc.header, kind=kind) from exc
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}", param="body") from exc
        except RecursionError as exc:  # `[[[[...` deeper than the parser's recursion limit
            raise ApiError(400, "the body is JSON nested too deeply to read", param="body") from exc
        invalid = _not_unicode(data)
        if invalid is not None:  # a "\ud800" escape: valid JSON, but no text can hold it
            field, problem = invalid
            raise ApiError(400, f"invalid field {field!r}: not valid Unicode ({problem})", param=field)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "body"
            raise ApiError(400, f"invalid field {field!r}: {first['msg']}", param=field) from exc

    def agent(self, name: str, *, param: str = "agent") -> AgentConfig:
        wanted = name.strip().lower()
        for agent in self.settings.agents:
            if agent.name.lower() == wanted or agent.id.lower() == wanted:
                return agent
        known = ", ".join(a.name for a in self.settings.agents) or "none"
        raise ApiError(404, f"no agent {name!r} here (agents: {known})", param=param, kind="not_found_error")

    def text(self, raw: str, *, param: str) -> str:
        try:
            return self.runtime.validate_text(raw)
        except InputError as exc:
            status = 413 if len(raw) > self.settings.conversation.max_message_chars else 400
            raise ApiError(status, f"invalid field {param!r}: {exc}", param=param) from exc

    # turns -------------------------------------------------------------------------------
    def message_text(self, raw: str, uploads: Sequence[Upload], *, param: str) -> str:
        """The message's text, checked; empty is fine when files came with it."""
        return raw if uploads and not raw.strip() else self.text(raw, param=param)

    async def submit(
        self,
        key: WebKey,
        agent: AgentConfig,
        text: str,
        user: str | None,
        listener: bool = False,
        uploads: Sequence[Upload] = (),
    ) -> tuple[Event, Listener | None]:
        """The client's message as an event of the web channel; with `listener`, a queue of
        the turn's live events, registered before the turn can start. `uploads` are kept
        first (`_kept`); the event's `meta["refused"]` lists the files refused."""
        identity = web_identity(key.id, user)
        speaker = Speaker(
            service=SERVICE,
            channel=identity.channel,
            speaker_id=identity.speaker_id,
            display_name=web_speaker_name(key, user),
        )
        await self.runtime.resolve_speaker(agent.id, speaker)
        attachments, refused = await self._kept(agent, identity.channel, identity.speaker_id, text, uploads)
        if refused:  # the agent reads why, and says so; the client reads it in `persyn.refused`
            text = " ".join([*(f"[a file I refused: {reason}]" for reason in refused), text]).strip()
        now = self.runtime.clock.now()
        event = Event(
            id=new_id(now),
            agent_id=agent.id,
            kind=EventKind.MESSAGE,
            service=SERVICE,
            channel=identity.channel,
            speaker=speaker,
            text=text,
            received_at=now,
            attachments=attachments,
            meta={"refused": " | ".join(refused)} if refused else {},
        )
        waiter = self.channel.wait_for(event.id, key.id) if listener else None
        try:
            await self.runtime.submit(event)
        except BaseException:
            self.channel.stop_waiting(event.id)
            raise
        return event, waiter

    async def _kept(
        self, agent: AgentConfig, channel: str, speaker_id: str, text: str, uploads: Sequence[Upload]
    ) -> tuple[tuple[Attachment, ...], list[str]]:
        """Each file kept whole or refused (SPEC §4 step 1). A message that is nothing but
        refused files is a 4xx naming the limit (413 for a size, pixel, length or storage
        limit; 415 for a file that is not what it claims or not a type taken), nothing kept;
        otherwise the rest of the message is answered and the refusals go with it."""
        kept: list[Attachment] = []
        refused: list[str] = []
        first: MediaRejected | None = None
        for index, upload in enumerate(uploads):
            try:
                kept.extend(
                    await self.runtime.keep_attachments(agent.id, SERVICE, channel, speaker_id, [upload])
                )
            except MediaRejected as exc:
                first = first or exc
                label = upload.filename or f"file {index + 1}"
                refused.append(f"{label}: {exc.reason}" + (f" ([senses] {exc.limit})" if exc.limit else ""))
        if first is not None and not kept and not text.strip():
            limit = f" ([senses] {first.limit})" if first.limit else ""
            raise ApiError(413 if first.limit else 415, f"{first.reason}{limit}", param="attachments")
        return tuple(kept), refused

    async def submitted_event(self, key: WebKey, event_id: str) -> AgentConfig:
        """The agent of event `event_id` if `key` submitted it (an operator key: any event);
        404 otherwise. Read from the store, where the event keeps its channel — a key's
        channel on the web is the key's id — so the answer survives a restart."""
        for agent in self.settings.agents:
            event = await self.runtime.get_event(agent.id, event_id)
            if event is not None and (key.operator or (event.service == SERVICE and event.channel == key.id)):
                return agent
        raise ApiError(
            404, f"no event {event_id} submitted with this key", param="event_id", kind="not_found_error"
        )

    async def marker(self, agent: AgentConfig, event_id: str) -> CompletionMarker:
        try:
            return await self.runtime.wait_marker(agent.id, event_id, self.settings.web.reply_timeout_seconds)
        except TimeoutError as exc:
            raise ApiError(
                504,
                f"no reply to {event_id} within {self.settings.web.reply_timeout_seconds:g}s; it stays queued",
                kind="timeout_error",
            ) from exc

    async def turn_usage(self, event_id: str) -> dict[str, int]:
        if self.flush_usage is not None:
            await asyncio.to_thread(self.flush_usage)
        prompt, completion = self.usage.take(event_id)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _not_unicode(data: object, path: str = "") -> tuple[str, str] | None:
    """The first string in parsed JSON (a key or a value) that is not valid Unicode: its
    field's dotted path (as pydantic names fields) and what is wrong with it."""
    if isinstance(data, str):
        problem = lone_surrogate(data)
        return None if problem is None else (path or "body", problem)
    items: list[tuple[str, object]] = []
    if isinstance(data, dict):
        for name, value in cast(dict[str, object], data).items():
            problem = lone_surrogate(name)
            if problem is not None:
                return (f"{path}.{name}" if path else name).encode(
                    "ascii", "backslashreplace"
                ).decode(), problem
            items.append((name, value))
    elif isinstance(data, list):
        items = [(str(index), value) for index, value in enumerate(cast(list[object], data))]
    for name, value in items:
        found = _not_unicode(value, f"{path}.{name}" if path else name)
        if found is not None:
            return found
    return None


def sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def on_console_store(
    work: Callable[[WebContext, Request], Awaitable[Response]],
) -> Callable[[WebContext, Request], Awaitable[Response]]:
    """`work` reading through the process's one store (`WebContext.console_store`), not a
    store opened per request; opened only when `work` first reads (after the key check)."""

    async def on_shared_store(context: WebContext, request: Request) -> Response:
        if context.console_store is None:
            return await work(context, request)
        with context.console_store.bound():
            return await work(context, request)

    return on_shared_store


def handler(
    context: WebContext, work: Callable[[WebContext, Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """One endpoint: its errors become JSON (4xx for the client's mistakes)."""

    async def endpoint(request: Request) -> Response:
        try:
            return await work(context, request)
        except ApiError as exc:
            return exc.response()
        except InputError as exc:
            return ApiError(400, str(exc)).response()
        except StoreError as exc:
            return _storage_unavailable(request, exc)
        except PersynError as exc:
            return ApiError(503, str(exc), kind="server_error").response()
        except Exception as exc:
            if not is_storage_full(exc):
                raise
            return _storage_unavailable(request, exc)

    return endpoint


def _storage_unavailable(request: Request, exc: Exception) -> Response:
    """The store failed (a full disk, a database away): the operator's log says what and where;
    the client gets a 503 that names no path and no SQL."""
    log.warning("%s %s: the storage failed: %s", request.method, request.url.path, exc)
    return ApiError(503, STORAGE_UNAVAILABLE, kind="server_error").response()


def upload_limit(settings: Settings) -> int:
    """The body limit of a route that takes files: `[web] max_upload_bytes`, or unset the
    largest `[senses]` per-kind byte limit as base64 (4/3 of it) plus `[web] max_body_bytes` for
    the rest of the body — a phone photo sent as a data URL is several MiB."""
    if settings.web.max_upload_bytes is not None:
        return settings.web.max_upload_bytes
    senses = settings.senses
    largest = max(senses.image_max_bytes, senses.audio_max_bytes, senses.document_max_bytes)
    return -(-largest * 4 // 3) + settings.web.max_body_bytes
