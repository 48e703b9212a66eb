"""The traces views (SPEC App. D): the recorded turns, and one turn's spans as a waterfall —
read from the local span store with the functions `persyn traces list | show` use."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.core.ids import id_time, is_id
from persyn.tracing import ATTR, SpanRecord, read_spans, summarize, trace_id_of, trace_spans
from persyn.web.console._params import moment, number, operator, the_agent
from persyn.web.context import ApiError, WebContext

__all__ = ["trace", "traces"]

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_OFF = "tracing is off: set [tracing] enabled = true"


async def traces(context: WebContext, request: Request) -> Response:
    """The turns recorded since `from` (default: the last day), newest first, at most `limit`."""
    await operator(context, request)
    agent = the_agent(context, request) if request.query_params.get("agent") else None
    now = context.runtime.clock.now()
    since = moment(request, "from", now) or now - timedelta(days=1)
    limit = number(request, "limit", 50, low=1, high=500)
    spans = await asyncio.to_thread(read_spans, context.settings.traces_dir, since=since)
    summaries = summarize(spans)
    if agent is not None:
        summaries = [s for s in summaries if s.agent_id == agent.id]
    newest = list(reversed(summaries[-limit:]))
    return JSONResponse(
        {
            "traces": [s.model_dump(mode="json") for s in newest],
            "enabled": context.settings.tracing.enabled,
            "note": None if context.settings.tracing.enabled else _OFF,
        }
    )


async def trace(context: WebContext, request: Request) -> Response:
    """One trace (by the event id a turn answered, or the trace id): every span with its
    offset from the start, its duration, its tokens — a waterfall's rows, in start order."""
    await operator(context, request)
    wanted = request.path_params["trace"].strip()
    since: datetime | None = None
    if is_id(wanted.upper()):
        trace_id = trace_id_of(wanted.upper())
        # Its spans end after the event arrived: the files of earlier days are not read
        # (a minute of slack for the clocks of the processes that wrote them).
        since = id_time(wanted.upper()) - timedelta(minutes=1)
    elif _TRACE_ID.match(wanted.lower()):
        trace_id = wanted.lower()
    else:
        raise ApiError(
            400,
            f"invalid trace {wanted!r}: neither an event id (a ULID) nor a trace id (32 hex digits)",
            param="trace",
        )
    spans = trace_spans(
        await asyncio.to_thread(read_spans, context.settings.traces_dir, since=since), trace_id
    )
    if not spans:
        note = "" if context.settings.tracing.enabled else f" ({_OFF})"
        raise ApiError(404, f"no trace of {wanted!r} is stored{note}", param="trace", kind="not_found_error")
    return JSONResponse({"trace_id": trace_id, "spans": _waterfall(spans)})


def _waterfall(spans: list[SpanRecord]) -> list[dict[str, Any]]:
    ids = {span.span_id for span in spans}
    depth: dict[str, int] = {}
    origin = min(span.start for span in spans)
    rows: list[dict[str, Any]] = []
    for span in spans:  # start order: a parent starts before its children
        parent = span.parent_id if span.parent_id in ids else None
        depth[span.span_id] = 0 if parent is None else depth.get(parent, 0) + 1
        rows.append(
            {
                "span_id": span.span_id,
                "parent_id": parent,
                "name": span.name,
                "kind": span.kind,
                "depth": depth[span.span_id],
                "offset_ms": round((span.start - origin).total_seconds() * 1000, 3),
                "duration_ms": round(span.duration_ms, 3),
                "status": span.status,
                "stage": span.text_attribute(ATTR.STAGE),
                "model": span.text_attribute(ATTR.MODEL),
                "tool": span.text_attribute(ATTR.TOOL),
                "input_tokens": span.int_attribute(ATTR.INPUT_TOKENS),
                "output_tokens": span.int_attribute(ATTR.OUTPUT_TOKENS),
                "attributes": span.attributes,
            }
        )
    return rows
