"""Introspecting the agent's own recent autonomous activity (SPEC §4.6, §4.7): what its
heartbeat beats and reminder firings were for and how they ended.

The runs are recorded by the runtime, which owns the scheduler; the tool reads them through
`ActivityContext.source`, an async callable `source(limit, kind)` returning the latest
`limit` runs (of `kind`, or of every kind for None), newest first. A run is anything with
the attributes of `ActivityRun` — `ActivityEntry` here, or the runtime's own row — so
`lambda limit, kind: recent_activity(store, agent_id, limit, kind)` is a source as it is.
The tool does not trust the source to order, filter or bound them: it does all three again.

A run carries the provenance of what it read (the reminder it fired for, the memories a
beat reviewed); `ActivityContext.sees` keeps the runs that may not surface here out of the
answer, and `ActivityContext.read` tells a self-initiated run what it has now seen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from persyn.store.base import Provenance
from persyn.store.ports.activity import UNATTRIBUTED_RUN
from persyn.tools.registry import Tool

__all__ = [
    "UNATTRIBUTED_RUN",
    "ActivityContext",
    "ActivityEntry",
    "ActivityKind",
    "ActivityRun",
    "ActivitySource",
    "activity_tools",
]

ActivityKind = Literal["heartbeat", "reminder"]  # schedule.HEARTBEAT_KIND, schedule.REMINDER_KIND
_OUTCOME_CHARS = 600


class ActivityEntry(BaseModel):
    """One autonomous run, as the runtime records it."""

    model_config = ConfigDict(frozen=True)

    at: datetime  # when it started
    kind: ActivityKind
    objective: str  # what it was woken with: the reminder's objective, the beat's prompt
    outcome: str  # what came of it: what was done or said, or why it was skipped or stopped
    reminder_id: str | None = None
    conversation_id: str | None = None  # its self-reflection conversation, when it ran
    tokens: int | None = None  # tokens it spent, when metered
    provenance: Provenance = UNATTRIBUTED_RUN  # where what it read may surface


class ActivityRun(Protocol):
    """What the tool reads of a run (read-only, so richer rows fit too)."""

    @property
    def at(self) -> datetime: ...
    @property
    def kind(self) -> str: ...
    @property
    def objective(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def reminder_id(self) -> str | None: ...
    @property
    def conversation_id(self) -> str | None: ...
    @property
    def tokens(self) -> int | None: ...
    @property
    def provenance(self) -> Provenance: ...


ActivitySource = Callable[[int, ActivityKind | None], Awaitable[Sequence[ActivityRun]]]


def _everyone(provenance: Provenance) -> bool:
    return True


async def _nothing(provenances: Sequence[Provenance]) -> None:
    return None


@dataclass(frozen=True)
class ActivityContext:
    source: ActivitySource
    sees: Callable[[Provenance], bool] = _everyone  # may a run's entry surface here?
    read: Callable[[Sequence[Provenance]], Awaitable[None]] = _nothing  # a run noted what it showed


class RecentActivityInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ActivityKind | None = Field(
        default=None, description="Only 'heartbeat' beats or only 'reminder' firings (default: both)."
    )
    limit: int = Field(default=10, ge=1, le=30, description="At most this many runs, newest first.")


class ActivityView(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: str = Field(description="When it ran (UTC).")
    kind: str
    objective: str
    outcome: str
    reminder_id: str | None = None
    conversation_id: str | None = None
    tokens: int | None = None


class ActivityList(BaseModel):
    model_config = ConfigDict(frozen=True)

    runs: list[ActivityView]


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _OUTCOME_CHARS else text[: _OUTCOME_CHARS - 1] + "…"


def activity_tools(context: ActivityContext) -> list[Tool[Any, Any]]:
    """recent_activity, bound to `context`."""

    async def recent(arguments: RecentActivityInput) -> ActivityList:
        entries = [
            e
            for e in await context.source(arguments.limit, arguments.kind)
            if (arguments.kind is None or e.kind == arguments.kind) and context.sees(e.provenance)
        ]
        entries.sort(key=lambda e: _utc(e.at), reverse=True)
        entries = entries[: arguments.limit]
        await context.read([e.provenance for e in entries])
        return ActivityList(
            runs=[
                ActivityView(
                    at=_utc(e.at).isoformat(),
                    kind=e.kind,
                    objective=_cut(e.objective),
                    outcome=_cut(e.outcome),
                    reminder_id=e.reminder_id,
                    conversation_id=e.conversation_id,
                    tokens=e.tokens,
                )
                for e in entries
            ]
        )

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="recent_activity",
            description=(
                "Look back at what you did on your own lately — your heartbeat reflections and "
                "the reminders that woke you — and how each ended, newest first. Use it before "
                "repeating something you may already have done, or to review your habits."
            ),
            input_model=RecentActivityInput,
            output_model=ActivityList,
            handler=recent,
        ),
    ]
    return tools
