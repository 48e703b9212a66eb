"""The Events API over HTTP (`[channels.slack] mode = "events"`): `POST /slack/events` on the
web server (`ChannelPlugin.web_routes`).

Each request is verified by the signing secret (SLACK_SIGNING_SECRET), not a web key:
`X-Slack-Signature` must be `v0=` HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{body}`, and a
timestamp more than 5 minutes from now is refused — 401 for a missing, wrong or stale one. A
`url_verification` is answered with its `challenge`. An `event_callback` is acknowledged at
once (Slack wants an answer within 3 s) and handled after (`inbound.py`); a redelivery
(`X-Slack-Retry-Num`) is the same event (its id derives from the message), so it is never
answered twice. Replies go out through the leased Slack channel's `deliver`: this process need
not hold the Slack lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any, cast

from slack_sdk.signature import SignatureVerifier
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from persyn.channels.slack.channel import web_client
from persyn.channels.slack.inbound import SlackInbound
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import BodyRefused, capped_body

__all__ = ["EVENTS_PATH", "events_route"]

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"


def events_route(
    inbound: SlackInbound,
    signing_secret: str,
    *,
    max_body_bytes: int,
    timeout_seconds: float,
    verifier: SignatureVerifier | None = None,
) -> Sequence[BaseRoute]:
    """The route; a body over `max_body_bytes` (`[web] max_body_bytes`) is refused (413) before
    any more of it is read or its signature is checked."""
    check = verifier or SignatureVerifier(signing_secret)
    handling: set[asyncio.Task[None]] = set()

    async def receive(request: Request) -> Response:
        try:
            body = await capped_body(
                request, max_body_bytes, seconds=timeout_seconds, setting="[web] max_body_bytes"
            )
        except BodyRefused as exc:
            log.warning("slack: refused an Events API request: %s", exc.reason)
            return PlainTextResponse(exc.reason, exc.status)
        timestamp = request.headers.get("x-slack-request-timestamp")
        signature = request.headers.get("x-slack-signature")
        if not signing_secret or not check.is_valid(body, timestamp, signature):
            log.warning(
                "slack: refused an Events API request from %s: %s",
                request.client.host if request.client else "?",
                "unsigned" if not signature or not timestamp else "bad or stale signature",
            )
            return PlainTextResponse("invalid signature", 401)
        try:
            payload = json.loads(body)
        except ValueError:
            log.warning("slack: an Events API request was not JSON")
            return PlainTextResponse("not JSON", 400)
        if not isinstance(payload, dict):
            return PlainTextResponse("not an object", 400)
        payload = cast(dict[str, Any], payload)
        if payload.get("type") == "url_verification":
            return JSONResponse({"challenge": str(payload.get("challenge") or "")})
        retry = request.headers.get("x-slack-retry-num")
        if retry:
            log.info("slack: redelivery %s (%s)", retry, request.headers.get("x-slack-retry-reason"))
        task = inbound.handle(payload)
        handling.add(task)
        task.add_done_callback(handling.discard)
        return Response(status_code=200)

    return [Route(EVENTS_PATH, receive, methods=["POST"])]


def inbound_for(
    config: Any, agent: Any, api: RuntimeAPI, *, bot_token: str, download_limit: int
) -> SlackInbound:
    return SlackInbound(web_client(config, bot_token), agent, api, download_limit=download_limit)
