"""The memory views (SPEC §4.1-4.3): browse and search the agent's records with filters,
one record with its provenance and the dialog it came from, and the recall tester — the
same `MemoryOps` the `persyn memory list | show | recall` commands use, so the browser
sees exactly what the CLI and the agent see."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from persyn.core.errors import InputError
from persyn.core.ids import is_id
from persyn.core.records import MemoryRecord, ScoredRecord, Sensitivity
from persyn.ops.graph import MemoryNeighbours, memory_neighbours
from persyn.ops.history import opened_capability
from persyn.ops.memory import MemoryOps, explain, memory_ops, said_json
from persyn.store.ports.activity import MEMORY_EVENT_KINDS, ActivityPort
from persyn.web.console._params import choice, moment, number, operator, text, the_agent
from persyn.web.context import ApiError, WebContext

__all__ = ["RecallRequest", "memories", "memory", "memory_events", "recall"]

_PAGE = 200  # records read per store call while browsing
_SCAN = 5000  # records read at most per request: a filter that rarely matches pages on
_SEARCH_HITS = 500  # keyword hits ranked per search before the filters


class RecallRequest(BaseModel):
    """`POST /v1/console/recall`: what recall would bring to mind for `query`."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000)
    agent: str | None = Field(default=None, max_length=200)
    channel: str | None = Field(default=None, min_length=1, max_length=500)
    participants: list[str] = Field(default_factory=list[str], max_length=20)
    budget_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    limit: int | None = Field(default=None, ge=1, le=200)


class _Filter(BaseModel):
    model_config = ConfigDict(frozen=True)

    channel: str | None = None
    person_id: str | None = None
    sensitivity: str | None = None
    min_importance: int = 1
    since: datetime | None = None
    until: datetime | None = None

    def keeps(self, record: MemoryRecord) -> bool:
        return (
            (self.channel is None or record.channel == self.channel)
            and (self.person_id is None or self.person_id in record.participant_ids)
            and (self.sensitivity is None or record.sensitivity.value == self.sensitivity)
            and record.importance >= self.min_importance
            and (self.since is None or record.created_at >= self.since)
            and (self.until is None or record.created_at < self.until)
        )


def _record(record: MemoryRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"agent_id"})


async def memories(context: WebContext, request: Request) -> Response:
    """A page of records, newest first (or best first with `q`), matching every filter."""
    await operator(context, request)
    agent = the_agent(context, request)
    now = context.runtime.clock.now()
    sensitivities = tuple(level.value for level in Sensitivity)
    query = text(request, "q")
    limit = number(request, "limit", 50, low=1, high=200)
    cursor = text(request, "cursor")
    if cursor is not None and not is_id(cursor.upper()):
        raise ApiError(400, f"invalid parameter 'cursor': {cursor!r} is not a memory id", param="cursor")
    async with memory_ops(
        context.settings, agent, context.runtime.clock, encoder=context.console_encoder()
    ) as ops:
        person = text(request, "person")
        wanted = _Filter(
            channel=text(request, "channel"),
            person_id=None if person is None else await ops.resolve_participant(person, create=False),
            sensitivity=choice(request, "sensitivity", ("", *sensitivities), "") or None,
            min_importance=number(request, "min_importance", 1, low=1, high=10),
            since=moment(request, "from", now),
            until=moment(request, "to", now),
        )
        if query is not None:
            found = await _search(ops, agent.id, query, wanted, limit)
            next_cursor = None
        else:
            found, next_cursor = await _browse(ops, agent.id, wanted, limit, cursor and cursor.upper())
        total = await ops.store.count_records(agent.id)
    return JSONResponse(
        {"memories": [_record(r) for r in found], "next_cursor": next_cursor, "total_records": total}
    )


async def _search(
    ops: MemoryOps, agent_id: str, query: str, wanted: _Filter, limit: int
) -> list[MemoryRecord]:
    channels = None if wanted.channel is None else [wanted.channel]
    hits = await ops.store.keyword_candidates(agent_id, query, _SEARCH_HITS, channels)
    rank = {record_id: at for at, (record_id, _) in enumerate(hits)}
    records = await ops.store.records_by_ids(agent_id, list(rank))
    records.sort(key=lambda record: rank[record.id])
    return [record for record in records if wanted.keeps(record)][:limit]


async def _browse(
    ops: MemoryOps, agent_id: str, wanted: _Filter, limit: int, cursor: str | None
) -> tuple[list[MemoryRecord], str | None]:
    """Newest first from `cursor`, reading at most `_SCAN` records: the next cursor is the
    last record read when more may follow (a page can be short when the filter is narrow)."""
    found: list[MemoryRecord] = []
    read = 0
    while read < _SCAN:
        page = await ops.store.list_records(agent_id, limit=_PAGE, before_id=cursor)
        for record in page:
            read += 1
            cursor = record.id
            if wanted.since is not None and record.created_at < wanted.since:
                return found, None  # newest first: nothing older can match
            if wanted.keeps(record):
                found.append(record)
                if len(found) == limit:
                    return found, cursor
        if len(page) < _PAGE:
            return found, None
    return found, cursor


async def memory(context: WebContext, request: Request) -> Response:
    """One record: its provenance and rating, its emotion, the dialog it came from."""
    await operator(context, request)
    agent = the_agent(context, request)
    async with memory_ops(
        context.settings, agent, context.runtime.clock, encoder=context.console_encoder()
    ) as ops:
        record, dialog = await ops.show(request.path_params["record_id"])
        try:
            emotions = await ops.emotions(record.id)
        except InputError:  # a store without emotion history: the record still shows
            emotions = None
        graph = _neighbours(await memory_neighbours(ops.settings, ops.agent.id, ops.store, record))
    return JSONResponse(
        {
            "memory": _record(record),
            "emotions": emotions,
            "graph": graph,
            "dialog": [m.model_dump(mode="json", exclude={"agent_id"}) for m in dialog],
        }
    )


def _neighbours(found: MemoryNeighbours | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "entities": [e.model_dump(mode="json") for e in found.entities],
        "relations": [{**r.model_dump(mode="json"), "line": r.line()} for r in found.relations],
        "memories": [_record(r) for r in found.memories],
    }


def _scored(scored: ScoredRecord, parts: dict[str, float | None]) -> dict[str, Any]:
    return {
        "memory": _record(scored.record),
        "score": round(scored.score, 6),
        "band": scored.band.value,
        "tokens": scored.tokens,
        "parts": parts,  # `persyn memory recall --explain`'s, from the same function
    }


async def recall(context: WebContext, request: Request) -> Response:
    """What recall returns for a question on a channel before some participants: the
    retrieval the agent runs when it answers (`MemoryOps.recall`)."""
    await operator(context, request)
    body = await context.body(request, RecallRequest)
    agent = context.agent(body.agent) if body.agent else the_agent(context, request)
    async with memory_ops(
        context.settings, agent, context.runtime.clock, encoder=context.console_encoder()
    ) as ops:
        found = await ops.recollect(
            body.query,
            channel=body.channel,
            participants=body.participants,
            now=None,
            budget_tokens=body.budget_tokens,
            limit=body.limit,
        )
        result = found.memories
        degraded = ops.degraded or result.degraded
    return JSONResponse(
        {
            "query": result.query,
            "channel": result.channel,
            "mode": result.mode,
            "results": [_scored(s, explain(result, at)) for at, s in enumerate(result.records)],
            # What was said, as the turn's recall merges it in (`[memory] dialog_recall`):
            # verbatim lines of this channel's dialog among these participants.
            "said": [said_json(line) for line in found.said],
            "considered": result.considered,
            "withheld": result.withheld,
            "over_budget": result.over_budget,
            "budget_tokens": result.budget_tokens,
            "tokens": result.tokens,
            "degraded": degraded,
        }
    )


async def memory_events(context: WebContext, request: Request) -> Response:
    """What happened to the memories, newest first: each cull (how many went, which) and each
    time the agent remembered harder (the dialog behind a memory it read) — the activity
    log's entries of those kinds."""
    await operator(context, request)
    agent = the_agent(context, request)
    limit = number(request, "limit", 50, low=1, high=500)
    kinds = [choice(request, "kind", MEMORY_EVENT_KINDS, "")] if text(request, "kind") else MEMORY_EVENT_KINDS
    async with opened_capability(context.settings, ActivityPort) as log:
        entries = [e for kind in kinds for e in await log.recent_activity(agent.id, limit=limit, kind=kind)]
    entries.sort(key=lambda e: (e.at, e.id), reverse=True)
    return JSONResponse(
        {"events": [e.model_dump(mode="json", exclude={"agent_id", "reminder_id"}) for e in entries[:limit]]}
    )
