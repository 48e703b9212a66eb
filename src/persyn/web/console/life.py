"""`GET /v1/console/life`: what the agent does on its own — reminders with their next fire
time, goals, the heartbeat and its recent runs with what each did and cost, guardrail
findings and the blocks in force, each with its scope, the emotional state over the latest exchanges — read with the functions `persyn reminders | goals | heartbeat | guardrails events`
use (`ops/autonomy.py`, `ops/guardrails.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.core.errors import InputError
from persyn.ops.autonomy import agent_goals, agent_reminders, heartbeat
from persyn.ops.guardrails import active_blocks, guardrail_events
from persyn.ops.history import opened_capability
from persyn.store.ports.emotions import EmotionsPort
from persyn.store.ports.guardrails import GuardrailEvent
from persyn.web.console._params import number, operator, the_agent
from persyn.web.context import WebContext

__all__ = ["channels", "life"]


async def _emotions(context: WebContext, agent_id: str, limit: int) -> list[dict[str, object]]:
    """The agent's emotional state after its latest exchanges, oldest first (SPEC §4.9); empty
    for a store that keeps no emotion history."""
    try:
        async with opened_capability(context.settings, EmotionsPort) as store:
            readings = await store.recent_emotions(agent_id, limit)
    except InputError:
        return []
    return [
        {"at": r.created_at.isoformat(), "top": r.top, "distribution": dict(r.distribution)}
        for r in reversed(readings)
    ]


def _dump(rows: Sequence[BaseModel]) -> list[object]:
    return [row.model_dump(mode="json", exclude={"agent_id"}) for row in rows]


def _findings(events: Sequence[GuardrailEvent]) -> list[dict[str, object]]:
    """Findings with the scope a block of theirs has (the agent, one person, one channel)."""
    return [{**e.model_dump(mode="json", exclude={"agent_id"}), "scope": e.scope} for e in events]


async def life(context: WebContext, request: Request) -> Response:
    await operator(context, request)
    agent = the_agent(context, request)
    limit = number(request, "limit", 20, low=1, high=200)
    now = context.runtime.clock.now()
    settings = context.settings
    reminders = await agent_reminders(settings, agent, include_cancelled=False)
    goals = await agent_goals(settings, agent)
    beat = await heartbeat(settings, agent, now, limit=limit)
    findings = await guardrail_events(settings, agent.id, None, limit)
    blocks = [b for b in await active_blocks(settings, now) if b.agent_id == agent.id]
    emotions = await _emotions(context, agent.id, limit)

    return JSONResponse(
        {
            "agent": {"id": agent.id, "name": agent.name},
            "now": now.isoformat(),
            "reminders": _dump([r for r in reminders if r.kind != "heartbeat"]),
            "goals": _dump(goals),
            "heartbeat": {
                "next_fire_at": None if beat.beat is None else beat.beat.next_fire_at.isoformat(),
                "asleep": beat.beat is None,
                "tokens_today": beat.tokens_today,
                "daily_token_budget": beat.budget,
                "runs": _dump(beat.activity),
            },
            "guardrail_findings": _findings(findings),
            "guardrail_blocks": _findings(blocks),  # in force now
            "emotions": emotions,
        }
    )


async def channels(context: WebContext, request: Request) -> Response:
    """The connection state of each channel attached in this process, live (SPEC §3): connected,
    connecting, reconnecting, or failing (attempts in a row failed) with the last failure. A
    network channel whose lease another process holds is not listed here."""
    await operator(context, request)
    return JSONResponse(
        {
            "channels": [
                {
                    "service": state.service,
                    "name": state.name,
                    "state": state.link.value,
                    "since": None if state.since is None else state.since.isoformat(),
                    "failures": state.failures,
                    "detail": state.detail,
                }
                for state in context.runtime.channel_states()
            ]
        }
    )
