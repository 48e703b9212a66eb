"""`GET /v1/console/people/{person}`: what the agent knows of someone beyond the directory's
digest — its observations (SPEC §4.4), how they changed and why, and its cached dossier —
read with the function `persyn people observations` uses (`ops.history.person_observations`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.ops.history import person_observations
from persyn.web.console._params import operator, the_agent
from persyn.web.context import WebContext

__all__ = ["person"]


async def person(context: WebContext, request: Request) -> Response:
    await operator(context, request)
    agent = the_agent(context, request)
    found, observations, history, dossier = await person_observations(
        context.settings, agent, request.path_params["person"]
    )
    return JSONResponse(
        {
            "person": found.model_dump(mode="json", exclude={"agent_id"}),
            "observations": [o.model_dump(mode="json", exclude={"agent_id"}) for o in observations],
            "changes": [c.model_dump(mode="json", exclude={"agent_id"}) for c in history],
            "dossier": dossier,
        }
    )
