"""Query parameters of the console's endpoints: each bad value a 400 naming it."""

from __future__ import annotations

from datetime import datetime

from starlette.requests import Request

from persyn.core.config import AgentConfig
from persyn.core.times import parse_time
from persyn.runtime.web_keys import WebKey
from persyn.web.context import ApiError, WebContext

__all__ = ["choice", "moment", "number", "operator", "text", "the_agent"]

_MAX_TEXT = 2000


async def operator(context: WebContext, request: Request) -> WebKey:
    """The request's key if it is an operator key: the console is the operator's (403 else)."""
    key = await context.key(request)
    if not key.operator:
        raise ApiError(
            403,
            f"key {key.name!r} is not an operator key: the console is not open to it",
            kind="permission_error",
        )
    return key


def the_agent(context: WebContext, request: Request) -> AgentConfig:
    """`?agent=` (name or id); the first agent when not given."""
    name = request.query_params.get("agent")
    if name:
        return context.agent(name)
    if not context.settings.agents:
        raise ApiError(404, "no agent here", param="agent", kind="not_found_error")
    return context.settings.agents[0]


def text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return None
    if len(value) > _MAX_TEXT:
        raise ApiError(400, f"invalid parameter {name!r}: over {_MAX_TEXT} characters", param=name)
    return value.strip()


def choice(request: Request, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.query_params.get(name) or default
    if value not in allowed:
        raise ApiError(
            400, f"invalid parameter {name!r}: {value!r} is not one of {', '.join(allowed)}", param=name
        )
    return value


def number(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(400, f"invalid parameter {name!r}: {raw!r} is not a whole number", param=name) from exc
    if not low <= value <= high:
        raise ApiError(400, f"invalid parameter {name!r}: {value} is not within {low}..{high}", param=name)
    return value


def moment(request: Request, name: str, now: datetime) -> datetime | None:
    """An ISO time (naive = UTC) or a span back from `now` like 30m, 12h, 7d (`parse_time`,
    the parser of the CLI's `--since`)."""
    raw = (request.query_params.get(name) or "").strip()
    return parse_time(raw, name, now=now) if raw else None
