"""The OpenAI-compatible endpoints: `GET /v1/models` (the agents) and
`POST /v1/chat/completions`, streamed or not, for unmodified clients.

Only the last user message is new input (its text and its files: `image_url`, `input_audio`,
`file` parts, `web/parts.py`; a message of files alone is answered too): the agent keeps its own memory of the
conversation, which is the key's (one key and one agent are one conversation). A `user`
field names one of several people behind one key. Streaming sends the draft as it is
generated; when the turn ends without speech (the decide step withdrew the draft, a budget,
a failure) the stream ends with an assistant message stating the reason — what a plain
client shows — marked `persyn.withdrawn`, never an HTTP error. `usage` reports the tokens of
the model calls the turn made until it answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from persyn.channels.web.channel import ENDED, Listener, LiveEvent
from persyn.core.config import AgentConfig
from persyn.core.events import CompletionMarker, Event
from persyn.runtime.web_keys import WebKey
from persyn.web.context import REVOKED, ApiError, WebContext
from persyn.web.models import ChatRequest
from persyn.web.parts import uploads_of

__all__ = ["chat_completions", "models", "silence_text"]


def silence_text(marker: CompletionMarker) -> str:
    return f"({marker.reason or 'no reply'})"


async def models(context: WebContext, request: Request) -> Response:
    await context.key(request)
    created = 0
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "id": a.name,
                    "object": "model",
                    "created": created,
                    "owned_by": "persyn",
                    "persyn": {"agent_id": a.id},
                }
                for a in context.settings.agents
            ],
        }
    )


def _last_user_text(body: ChatRequest) -> tuple[str, int]:
    for index in range(len(body.messages) - 1, -1, -1):
        if body.messages[index].role == "user":
            return body.messages[index].text(), index
    raise ApiError(400, "invalid field 'messages': no message with role 'user'", param="messages")


async def chat_completions(context: WebContext, request: Request) -> Response:
    key = await context.key(request)
    body = await context.body(request, ChatRequest, files=True)
    agent = context.agent(body.model, param="model")
    raw, index = _last_user_text(body)
    uploads = uploads_of(body.messages[index].parts(), f"messages.{index}.content")
    text = context.message_text(raw, uploads, param=f"messages.{index}.content")
    event, listener = await context.submit(key, agent, text, body.user, listener=body.stream, uploads=uploads)
    if listener is None:
        marker = await context.marker(agent, event.id)
        if not await context.still_valid(key):  # revoked while the turn ran: its reply is not given
            raise ApiError(401, REVOKED, kind="authentication_error")
        return JSONResponse(await _completion(context, agent, event, marker))
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return StreamingResponse(
        _stream(context, key, agent, event, listener, include_usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _persyn(event: Event, marker: CompletionMarker) -> dict[str, Any]:
    found: dict[str, Any] = {
        "event_id": event.id,
        "transmitted": marker.transmitted,
        "withdrawn": not marker.transmitted,
        "reason": marker.reason,
    }
    if event.attachments:
        found["attachments"] = [attachment.model_dump(mode="json") for attachment in event.attachments]
    if event.meta.get("refused"):
        found["refused"] = event.meta["refused"].split(" | ")
    return found


async def _completion(
    context: WebContext, agent: AgentConfig, event: Event, marker: CompletionMarker
) -> dict[str, Any]:
    content = marker.text if marker.transmitted else silence_text(marker)
    return {
        "id": f"chatcmpl-{event.id}",
        "object": "chat.completion",
        "created": int(event.received_at.timestamp()),
        "model": agent.name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": await context.turn_usage(event.id),
        "persyn": _persyn(event, marker),
    }


def _chunk(
    event: Event, agent: AgentConfig, delta: dict[str, Any], finish: str | None = None, **extra: Any
) -> str:
    data: dict[str, Any] = {
        "id": f"chatcmpl-{event.id}",
        "object": "chat.completion.chunk",
        "created": int(event.received_at.timestamp()),
        "model": agent.name,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        **extra,
    }
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _stream(
    context: WebContext,
    key: WebKey,
    agent: AgentConfig,
    event: Event,
    listener: Listener,
    include_usage: bool,
) -> AsyncIterator[str]:
    waiting = asyncio.ensure_future(
        context.runtime.wait_marker(agent.id, event.id, context.settings.web.reply_timeout_seconds)
    )
    streamed: list[str] = []
    try:
        yield _chunk(event, agent, {"role": "assistant", "content": ""})
        while True:
            getting = asyncio.ensure_future(listener.queue.get())
            done, _ = await asyncio.wait({getting, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if getting not in done:
                getting.cancel()
                break
            batch = await context.deliverable(key, listener, getting.result())
            if batch[-1].type == ENDED:
                yield _REVOKED_CHUNK
                return
            for item in batch:
                piece = _piece(event, agent, item, streamed)
                if piece:
                    yield piece
        # what the turn published before its marker, and the answer: only to a key that works
        rest = [] if listener.queue.empty() else listener.waiting(listener.queue.get_nowait())
        if not await context.still_valid(key) or any(item.type == ENDED for item in rest):
            context.channel.end_key(key.id, REVOKED)
            yield _REVOKED_CHUNK
            return
        for item in rest:
            piece = _piece(event, agent, item, streamed)
            if piece:
                yield piece
        try:
            marker = waiting.result()
        except TimeoutError:
            note = (
                f"(no reply within {context.settings.web.reply_timeout_seconds:g}s; the message stays queued)"
            )
            yield _chunk(
                event, agent, {"content": note}, "stop", persyn={"event_id": event.id, "timeout": True}
            )
            yield "data: [DONE]\n\n"
            return
        said = "".join(streamed)
        if marker.transmitted:
            final = marker.text or ""
            if " ".join(said.split()) != " ".join(final.split()):
                # Revised, declined or redirected after the draft streamed: the sent text follows.
                lead = "\n\n" if said else ""
                yield _chunk(
                    event,
                    agent,
                    {"content": lead + final},
                    persyn={**_persyn(event, marker), "revised": bool(said)},
                )
        else:
            lead = "\n\n" if said else ""
            yield _chunk(
                event, agent, {"content": lead + silence_text(marker)}, persyn=_persyn(event, marker)
            )
        yield _chunk(event, agent, {}, "stop", persyn=_persyn(event, marker))
        if include_usage:
            usage = await context.turn_usage(event.id)
            data = {
                "id": f"chatcmpl-{event.id}",
                "object": "chat.completion.chunk",
                "created": int(event.received_at.timestamp()),
                "model": agent.name,
                "choices": [],
                "usage": usage,
            }
            yield f"data: {json.dumps(data)}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        context.channel.stop_waiting(event.id)
        if not waiting.done():
            waiting.cancel()


_REVOKED_CHUNK = (
    f"data: {json.dumps({'error': {'message': REVOKED, 'type': 'authentication_error', 'code': 401}})}\n\n"
)


def _piece(event: Event, agent: AgentConfig, item: LiveEvent, streamed: list[str]) -> str | None:
    """A live event as a chunk: draft deltas are content; the rest rides in `persyn`."""
    if item.type != "token":
        return None
    phase, kind, text = item.data.get("phase"), item.data.get("kind"), str(item.data.get("text") or "")
    if phase == "draft" and kind == "delta" and text:
        streamed.append(text)
        return _chunk(event, agent, {"content": text})
    if kind in ("tool_start", "tool_end") or phase == "revise":
        return _chunk(event, agent, {}, persyn={"phase": phase, "kind": kind, "text": text})
    return None
