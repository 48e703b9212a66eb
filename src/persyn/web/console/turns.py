"""`GET /v1/console/turns/{event_id}`: what deliberation did for one turn (SPEC §4.2) — each
critic's lens and objections or why it was skipped, the tools, the decision and its reason —
and how the turn ended: the record `persyn conversations show --deliberation` prints."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.core.ids import is_id
from persyn.ops.history import opened_store
from persyn.web.console._params import operator, the_agent
from persyn.web.context import ApiError, WebContext

__all__ = ["turn"]


async def turn(context: WebContext, request: Request) -> Response:
    await operator(context, request)
    agent = the_agent(context, request)
    event_id = request.path_params["event_id"].upper()
    if not is_id(event_id):
        raise ApiError(
            400, f"invalid event id {request.path_params['event_id']!r}: expected a ULID", param="event_id"
        )
    async with opened_store(context.settings) as store:
        found = await store.deliberation_traces(agent.id, [event_id])
    try:
        marker = await context.runtime.wait_marker(agent.id, event_id, 0.01)
    except TimeoutError:
        ended = None
    else:
        ended = {"transmitted": marker.transmitted, "text": marker.text, "reason": marker.reason}
    if not found and ended is None:
        raise ApiError(404, f"no turn {event_id} recorded for {agent.name}", kind="not_found_error")
    return JSONResponse(
        {"event_id": event_id, "deliberation": found[0].trace if found else None, "ended": ended}
    )
