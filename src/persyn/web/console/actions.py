"""`POST /v1/console/actions`: the operator's actions (forget a memory, cancel a reminder,
pause or resume the heartbeat) — only what the CLI already does, through the same functions
(`ops/operator_actions.py`), each asked to be confirmed and recorded in the activity log."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.ops.operator_actions import OPERATOR_ACTIONS, take_action
from persyn.web.console._params import operator, the_agent
from persyn.web.context import ApiError, WebContext

__all__ = ["ActionRequest", "action"]


class ActionRequest(BaseModel):
    """What to do, to what (a memory or reminder id; none for the heartbeat), confirmed."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(min_length=1, max_length=40)
    target: str | None = Field(default=None, min_length=1, max_length=40)
    agent: str | None = Field(default=None, max_length=200)
    # The console asks first; a request that did not is refused, naming this field.
    confirm: Literal[True]


async def action(context: WebContext, request: Request) -> Response:
    key = await operator(context, request)
    body = await context.body(request, ActionRequest)
    if body.action not in OPERATOR_ACTIONS:
        raise ApiError(
            400,
            f"invalid field 'action': {body.action!r} is not one of {', '.join(OPERATOR_ACTIONS)}",
            param="action",
        )
    if OPERATOR_ACTIONS[body.action] != (body.target is not None):
        needs = "needs a target id" if OPERATOR_ACTIONS[body.action] else "takes no target"
        raise ApiError(400, f"invalid field 'target': {body.action!r} {needs}", param="target")
    agent = context.agent(body.agent) if body.agent else the_agent(context, request)
    done = await take_action(
        context.settings,
        agent,
        body.action,
        body.target,
        by=key.name,
        clock=context.runtime.clock,
        encoder=context.console_encoder(),
    )
    return JSONResponse(
        {
            "action": done.action,
            "target": done.target,
            "outcome": done.outcome,
            "logged": done.logged.model_dump(mode="json", exclude={"agent_id"}),
        }
    )
