"""The web console's JSON API (issue 40): the operator's views of memory, usage, traces and
the agent's life, behind operator keys only (403 for any other key). `ROUTES` is the one
list the app serves, `/openapi.json` documents and the security test walks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from persyn.web.console.actions import ActionRequest, action
from persyn.web.console.life import channels, life
from persyn.web.console.memory import RecallRequest, memories, memory, memory_events, recall
from persyn.web.console.people import person
from persyn.web.console.traces import trace, traces
from persyn.web.console.turns import turn
from persyn.web.console.usage import usage
from persyn.web.context import WebContext, handler, on_console_store

__all__ = ["ROUTES", "ActionRequest", "ConsoleRoute", "RecallRequest", "routes"]


@dataclass(frozen=True)
class ConsoleRoute:
    path: str
    method: str
    work: Callable[[WebContext, Request], Awaitable[Response]]
    summary: str
    query: tuple[str, ...] = ()  # the query parameters it reads
    body: type | None = None


_RANGE = ("agent", "from", "to")
ROUTES: tuple[ConsoleRoute, ...] = (
    ConsoleRoute(
        "/v1/console/usage",
        "GET",
        usage,
        "The usage ledger over a range, whole and by day or hour, grouped `by` (equal to `persyn usage`)",
        (*_RANGE, "by", "bucket"),
    ),
    ConsoleRoute(
        "/v1/console/memories",
        "GET",
        memories,
        "The agent's memories, newest first (best first with `q`), filtered; paged by `cursor`",
        (*_RANGE, "q", "channel", "person", "sensitivity", "min_importance", "limit", "cursor"),
    ),
    ConsoleRoute(
        "/v1/console/memory-events",
        "GET",
        memory_events,
        "What happened to the memories, newest first: culls (how many, which) and the agent "
        "remembering harder (the dialog behind a memory it read)",
        ("agent", "kind", "limit"),
    ),
    ConsoleRoute(
        "/v1/console/memories/{record_id}",
        "GET",
        memory,
        "One memory: provenance, rating, emotion, the dialog it came from and its graph neighbours",
        ("agent",),
    ),
    ConsoleRoute(
        "/v1/console/recall",
        "POST",
        recall,
        "The recall tester: what recall returns for a question, with each result's score parts",
        ("agent",),
        RecallRequest,
    ),
    ConsoleRoute(
        "/v1/console/traces",
        "GET",
        traces,
        "The recorded turns, newest first (default: the last day)",
        ("agent", "from", "limit"),
    ),
    ConsoleRoute(
        "/v1/console/traces/{trace}",
        "GET",
        trace,
        "One turn's spans as waterfall rows (by event id or trace id)",
    ),
    ConsoleRoute(
        "/v1/console/turns/{event_id}",
        "GET",
        turn,
        "One turn's deliberation (critics' lenses and objections, tools, the decision) and how it ended",
        ("agent",),
    ),
    ConsoleRoute(
        "/v1/console/life",
        "GET",
        life,
        "Reminders, goals, the heartbeat and its runs, guardrail findings",
        ("agent", "limit"),
    ),
    ConsoleRoute(
        "/v1/console/channels",
        "GET",
        channels,
        "Each channel's connection state, live: connected, connecting, reconnecting or failing",
    ),
    ConsoleRoute(
        "/v1/console/people/{person}",
        "GET",
        person,
        "A person's page: the agent's observations of them, how each changed and why, its dossier",
        ("agent",),
    ),
    ConsoleRoute(
        "/v1/console/actions",
        "POST",
        action,
        "An operator action the CLI also has (forget_memory, cancel_reminder, pause_heartbeat, "
        "resume_heartbeat), with `confirm: true`; recorded in the activity log",
        body=ActionRequest,
    ),
)


def routes(context: WebContext) -> list[Route]:
    return [Route(r.path, handler(context, on_console_store(r.work)), methods=[r.method]) for r in ROUTES]
