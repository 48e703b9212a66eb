"""The OpenAPI description served at `/openapi.json` (written out: the routes are few and
their bodies are the pydantic models of `web/models.py`, whose JSON schemas it embeds)."""

from __future__ import annotations

import re
from typing import Any

from persyn.web.console import ROUTES as CONSOLE_ROUTES
from persyn.web.models import (
    AddressChange,
    ChatRequest,
    EventRequest,
    IdentityChange,
    MergeRequest,
    RenameRequest,
)

__all__ = ["schema"]

_AGENT = {
    "name": "agent",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "Agent name or id.",
}
_PERSON = {
    "name": "person",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "Contact id or unique name.",
}
_ERROR = {"description": "A JSON error: {error: {message, type, param, code}}"}


def _body(model: type[Any]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
    }


def _op(
    summary: str,
    *,
    params: list[dict[str, Any]] | None = None,
    body: type[Any] | None = None,
    ok: str = "200",
    media: str = "application/json",
    operator: bool = False,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary + (" (operator keys only)" if operator else ""),
        "parameters": params or [],
        "responses": {
            ok: {"description": "OK", "content": {media: {}}},
            "400": _ERROR,
            "401": _ERROR,
            "404": _ERROR,
        },
    }
    if body is not None:
        op["requestBody"] = _body(body)
        op["responses"]["413"] = _ERROR
    if operator:
        op["responses"]["403"] = _ERROR
    return op


def schema() -> dict[str, Any]:
    models = (
        ChatRequest,
        EventRequest,
        RenameRequest,
        MergeRequest,
        IdentityChange,
        AddressChange,
        *(r.body for r in CONSOLE_ROUTES if r.body is not None),
    )
    components: dict[str, Any] = {}
    for model in models:
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(found.pop("$defs", {}))
        components[model.__name__] = found
    base = "/v1/agents/{agent}"
    paths = _paths(base)
    for route in CONSOLE_ROUTES:
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", route.path)
        ] + [
            {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
            for name in route.query
        ]
        paths.setdefault(route.path, {})[route.method.lower()] = _op(
            route.summary, params=params, body=route.body, operator=True
        )
    return {
        "openapi": "3.1.0",
        "info": {"title": "Persyn web API", "version": "1"},
        "components": {
            "schemas": components,
            "securitySchemes": {
                "key": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "psk-... (`persyn web keys create`)",
                }
            },
        },
        "security": [{"key": []}],
        "paths": paths,
    }


def _paths(base: str) -> dict[str, Any]:
    return {
        "/healthz": {"get": {**_op("Liveness (no key needed)"), "security": []}},
        "/v1/models": {"get": _op("The agents, as OpenAI models")},
        "/v1/chat/completions": {
            "post": _op("OpenAI-compatible chat completion (stream or not)", body=ChatRequest)
        },
        "/v1/me": {"get": _op("The key in use")},
        "/v1/agents": {"get": _op("The agents")},
        f"{base}/events": {
            "post": _op(
                "Submit a message; returns its event id at once",
                params=[_AGENT],
                body=EventRequest,
                ok="202",
            )
        },
        "/v1/events/{event_id}": {
            "get": _op(
                "The completion marker: pending, transmitted (text) or silent (reason)",
                params=[{"name": "event_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            )
        },
        f"{base}/stream": {
            "get": _op(
                "Server-Sent Events of the key's conversation: token (phase draft|revise, kind delta|tool_start|tool_end|end; a tool_start names the tool in text, with its shortened arguments for an operator key; a tool_end carries the result's status), withdraw, notice, message, deliberation_done, dropped, revoked (the key was revoked: the stream ends)",
                params=[_AGENT],
                media="text/event-stream",
            )
        },
        f"{base}/conversations": {"get": _op("The key's own conversations", params=[_AGENT])},
        f"{base}/conversations/{{conversation}}": {
            "get": _op(
                "A conversation's dialog (a client key: its own only)",
                params=[
                    _AGENT,
                    {
                        "name": "conversation",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
            )
        },
        f"{base}/contacts": {"get": _op("The directory", params=[_AGENT], operator=True)},
        f"{base}/contacts/merge": {
            "post": _op("Merge two contacts", params=[_AGENT], body=MergeRequest, operator=True)
        },
        f"{base}/contacts/{{person}}": {
            "get": _op("A contact's digest", params=[_AGENT, _PERSON], operator=True)
        },
        f"{base}/contacts/{{person}}/rename": {
            "post": _op("Rename a contact", params=[_AGENT, _PERSON], body=RenameRequest, operator=True)
        },
        f"{base}/contacts/{{person}}/identities": {
            "post": _op(
                "Attach or detach an identity",
                params=[_AGENT, _PERSON],
                body=IdentityChange,
                operator=True,
            )
        },
        f"{base}/contacts/{{person}}/addresses": {
            "post": _op(
                "Add or remove an address", params=[_AGENT, _PERSON], body=AddressChange, operator=True
            )
        },
        f"{base}/channels": {"get": _op("Channels the agent has talked on", params=[_AGENT], operator=True)},
        f"{base}/channels/{{name}}": {
            "get": _op(
                "A channel's recent conversations (SERVICE:CHANNEL)",
                params=[
                    _AGENT,
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                operator=True,
            )
        },
    }
