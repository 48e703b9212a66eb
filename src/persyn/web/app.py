"""The web API (SPEC §3 web channel, App. B): a Starlette application over `RuntimeAPI`.

- `/v1/chat/completions`, `/v1/models`: OpenAI-compatible (`web/openai_api.py`).
- `/v1/agents/{agent}/events`, `/v1/events/{id}`, `/v1/agents/{agent}/stream`: the native
  API — submit, the completion marker, live Server-Sent Events.
- `/v1/agents/{agent}/contacts...`, `/channels...`, `/conversations/{id}`: the directory,
  through the same operator logic the CLI uses (`ops/history.py`); operator keys only.
- `/v1/console/...`: the operator's console views — memory, recall, usage, traces, the
  agent's life (`web/console/`); operator keys only.
- `/v1/voice`: the chat page's "talk" control, a WebSocket carrying the microphone in and the
  agent's speech out (`web/voice.py`), when `[voice] enabled`; the key in its first message.
- `/`: the chat page (static files of this package); `/healthz`; `/openapi.json`.
- The webhooks of configured chat networks (`ChannelPlugin.web_routes`), each verified by its
  network's own signature rather than a key.

Every endpoint but `/healthz`, the page's static files and the networks' webhooks needs a key (`Authorization:
Bearer psk-...`); bodies are size-limited; every error is JSON naming what was wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from persyn.channels.registry import network_web_routes
from persyn.channels.web.channel import ENDED, SERVICE, LiveEvent
from persyn.core.ids import is_id
from persyn.web import console, directory, openai_api
from persyn.web.context import REVOKED, ApiError, WebContext, handler, sse
from persyn.web.models import EventRequest
from persyn.web.openapi import schema
from persyn.web.parts import upload_of_file
from persyn.web.voice import voice_route

__all__ = ["build_app"]

STATIC = Path(__file__).parent / "static"
_HEARTBEAT_SECONDS = 15.0


# native API ---------------------------------------------------------------------------------
async def healthz(context: WebContext, request: Request) -> Response:
    return JSONResponse({"ok": True})


async def post_event(context: WebContext, request: Request) -> Response:
    key = await context.key(request)
    agent = context.agent(request.path_params["agent"])
    body = await context.body(request, EventRequest, files=True)
    uploads = [upload_of_file(file, f"attachments.{index}") for index, file in enumerate(body.attachments)]
    text = context.message_text(body.text, uploads, param="text")
    event, _ = await context.submit(key, agent, text, body.user, uploads=uploads)
    answer: dict[str, object] = {
        "event_id": event.id,
        "agent": agent.name,
        "status_url": f"/v1/events/{event.id}",
    }
    if event.attachments:
        answer["attachments"] = [attachment.model_dump(mode="json") for attachment in event.attachments]
    if event.meta.get("refused"):
        answer["refused"] = event.meta["refused"].split(" | ")
    return JSONResponse(answer, status_code=202)


async def get_event(context: WebContext, request: Request) -> Response:
    key = await context.key(request)
    event_id = request.path_params["event_id"].upper()
    if not is_id(event_id):
        raise ApiError(
            400, f"invalid event id {request.path_params['event_id']!r}: expected a ULID", param="event_id"
        )
    agent = await context.submitted_event(key, event_id)
    try:
        marker = await context.runtime.wait_marker(agent.id, event_id, 0.01)
    except TimeoutError:
        return JSONResponse({"event_id": event_id, "status": "pending"})
    return JSONResponse(
        {
            "event_id": event_id,
            "status": "transmitted" if marker.transmitted else "silent",
            "text": marker.text,
            "reason": marker.reason,
            "created_at": marker.created_at.isoformat(),
        }
    )


async def stream(context: WebContext, request: Request) -> Response:
    """Server-Sent Events for the key's conversation with one agent: token deltas labelled
    by phase, withdrawals, notices, every message delivered (replies and what the agent
    sends on its own, such as a reminder firing)."""
    key = await context.key(request)
    agent = context.agent(request.path_params["agent"])
    listener = context.channel.listen(agent.id, key.id)
    # What waited for this channel in the outbox (written by any process) is delivered now.
    await context.runtime.deliver_pending(SERVICE)

    async def events() -> AsyncIterator[str]:
        try:
            yield ": connected\n\n"
            while True:
                if listener.dropped and listener.queue.empty():
                    yield sse(
                        "dropped", {"reason": "this client fell too far behind and was dropped; reconnect"}
                    )
                    return
                try:
                    first: LiveEvent = await asyncio.wait_for(listener.queue.get(), _HEARTBEAT_SECONDS)
                except TimeoutError:
                    if not await context.still_valid(key):
                        yield sse(ENDED, {"type": ENDED, "event_id": "", "reason": REVOKED})
                        return
                    yield ": keep-alive\n\n"
                    continue
                for item in await context.deliverable(key, listener, first):
                    yield sse(item.type, item.payload(operator=key.operator))
                    if item.type == ENDED:  # the key was revoked: the stream ends here
                        return
        finally:
            context.channel.unlisten(agent.id, key.id, listener)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def whoami(context: WebContext, request: Request) -> Response:
    key = await context.key(request)
    return JSONResponse({"id": key.id, "name": key.name, "operator": key.operator})


async def agents(context: WebContext, request: Request) -> Response:
    await context.key(request)
    return JSONResponse({"agents": [{"id": a.id, "name": a.name} for a in context.settings.agents]})


async def index(context: WebContext, request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)


_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def build_app(context: WebContext) -> Starlette:
    async def openapi(context: WebContext, request: Request) -> Response:
        return JSONResponse(schema())

    routes: list[BaseRoute] = [
        Route("/", handler(context, index)),
        Route("/healthz", handler(context, healthz)),
        Route("/openapi.json", handler(context, openapi)),
        Route("/v1/models", handler(context, openai_api.models)),
        Route("/v1/chat/completions", handler(context, openai_api.chat_completions), methods=["POST"]),
        Route("/v1/me", handler(context, whoami)),
        Route("/v1/agents", handler(context, agents)),
        Route("/v1/agents/{agent}/events", handler(context, post_event), methods=["POST"]),
        Route("/v1/events/{event_id}", handler(context, get_event)),
        Route("/v1/agents/{agent}/stream", handler(context, stream)),
        *directory.routes(context),
        *console.routes(context),
        voice_route(context),
        *network_web_routes(context.settings, context.runtime),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    middleware: list[Middleware] = []
    if context.settings.web.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(context.settings.web.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return ApiError(
            status, f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'not found')}"
        ).response()

    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={404: not_found, 405: not_found}
    )
