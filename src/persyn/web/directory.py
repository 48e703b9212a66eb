"""The directory and the channels over HTTP, for operator keys (SPEC §4.5, App. B): the same
operator logic the CLI's `persyn contacts` / `persyn channels` / `persyn conversations` use
(`ops/history.py`), so browsing and curation behave identically on both surfaces.

A client key may read only its own conversations (the web channel named by its id)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from persyn.channels.web.channel import SERVICE
from persyn.ops import history as inspect
from persyn.store.ports.directory import Identity
from persyn.web.context import ApiError, WebContext, handler, on_console_store
from persyn.web.models import AddressChange, IdentityChange, MergeRequest, RenameRequest

__all__ = ["routes"]


def _digest(conversations: list[tuple[Any, str | None]]) -> list[dict[str, Any]]:
    return [{**c.model_dump(mode="json"), "summary": summary} for c, summary in conversations]


async def list_contacts(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    found = await inspect.contacts(context.settings, agent)
    return JSONResponse({"contacts": [c.model_dump(mode="json") for c in found]})


async def show_contact(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    digest = await inspect.contact(context.settings, agent, request.path_params["person"])
    data = digest.model_dump(mode="json", exclude={"conversations"})
    data["conversations"] = _digest(digest.conversations)
    return JSONResponse(data)


async def rename(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    body = await context.body(request, RenameRequest)
    person = await inspect.rename_contact(context.settings, agent, request.path_params["person"], body.name)
    return JSONResponse(person.model_dump(mode="json"))


async def merge(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    body = await context.body(request, MergeRequest)
    person = await inspect.merge_contacts(context.settings, agent, body.survivor, body.other, body.name)
    return JSONResponse(person.model_dump(mode="json"))


async def identity(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    body = await context.body(request, IdentityChange)
    changed = Identity(service=body.service, channel=body.channel, speaker_id=body.speaker_id)
    person = await inspect.change_identity(
        context.settings, agent, request.path_params["person"], changed, attach=body.attach
    )
    return JSONResponse(person.model_dump(mode="json"))


async def address(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    body = await context.body(request, AddressChange)
    person, changed = await inspect.change_address(
        context.settings,
        agent,
        request.path_params["person"],
        body.label,
        body.value,
        add=body.add,
        now=context.runtime.clock.now(),
    )
    return JSONResponse({"person": person.model_dump(mode="json"), "changed": changed})


async def list_channels(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    found = await inspect.channels(context.settings, agent)
    return JSONResponse({"channels": [{"service": c.service, "channel": c.channel} for c in found]})


async def show_channel(context: WebContext, request: Request) -> Response:
    await context.operator(request)
    agent = context.agent(request.path_params["agent"])
    digest = await inspect.channel(context.settings, agent, request.path_params["name"])
    return JSONResponse(
        {"service": digest.service, "channel": digest.channel, "conversations": _digest(digest.conversations)}
    )


async def conversation(context: WebContext, request: Request) -> Response:
    """A conversation's full dialog: any for an operator key, a client's own otherwise."""
    key = await context.key(request)
    agent = context.agent(request.path_params["agent"])
    talk, messages, _ = await inspect.conversation_dialog(
        context.settings, agent, request.path_params["conversation"]
    )
    if not key.operator and (talk.service, talk.channel) != (SERVICE, key.id):
        raise ApiError(
            404, f"no conversation {talk.id} of this key", param="conversation", kind="not_found_error"
        )
    return JSONResponse(
        {
            "conversation": talk.model_dump(mode="json"),
            "messages": [m.model_dump(mode="json") for m in messages],
        }
    )


async def own_conversations(context: WebContext, request: Request) -> Response:
    """The key's own conversations with an agent (newest first)."""
    key = await context.key(request)
    agent = context.agent(request.path_params["agent"])
    found = await inspect.list_conversations(context.settings, agent, key.id, 20)
    return JSONResponse({"conversations": [c.model_dump(mode="json") for c in found if c.service == SERVICE]})


def routes(context: WebContext) -> list[Route]:
    """Each on the process's one store (`on_console_store`), as the console's routes are."""
    base = "/v1/agents/{agent}"
    served: tuple[tuple[str, Callable[[WebContext, Request], Awaitable[Response]], str], ...] = (
        ("/contacts", list_contacts, "GET"),
        ("/contacts/merge", merge, "POST"),
        ("/contacts/{person}", show_contact, "GET"),
        ("/contacts/{person}/rename", rename, "POST"),
        ("/contacts/{person}/identities", identity, "POST"),
        ("/contacts/{person}/addresses", address, "POST"),
        ("/channels", list_channels, "GET"),
        ("/channels/{name}", show_channel, "GET"),
        ("/conversations", own_conversations, "GET"),
        ("/conversations/{conversation}", conversation, "GET"),
    )
    return [
        Route(base + path, handler(context, on_console_store(work)), methods=[method])
        for path, work, method in served
    ]
