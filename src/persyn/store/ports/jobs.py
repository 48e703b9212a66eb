"""The conversation jobs' storage (ARCHITECTURE §4), with their row types: consolidation
state (`JobsPort`, the "consolidation jobs" capability: `store/capabilities.py`) and the
extraction watermarks (`WatermarksPort`, part of `Store`: every incremental reader uses them).

Both were flag prefixes (`consolidated:`, `graph-seen:`, `observed-seen:`) until migration
13 moved them here: a consolidation is a small state machine that a sweep must be able to
query (what failed, when to try again), and a watermark is one row per reader and
conversation, not a key to parse.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from persyn.core.errors import InputError
from persyn.core.ids import parse_id

__all__ = [
    "MAX_ERROR_CHARS",
    "Consolidation",
    "ConsolidationStatus",
    "JobsPort",
    "Watermark",
    "WatermarksPort",
]

MAX_ERROR_CHARS = 2000
_READER_CHARS = 32


def _canonical(value: str, what: str) -> str:
    canonical = parse_id(value, what=what)
    if canonical != value:
        raise InputError(f"{what} {value!r} is not canonical; pass parse_id(...) of it: {canonical!r}")
    return canonical


class ConsolidationStatus(StrEnum):
    PENDING = "pending"  # closed, its close hooks enqueued, not yet consolidated
    FAILED = "failed"  # the last attempt failed; `next_attempt_at` says when the sweep retries
    DONE = "done"  # consolidated, found to hold nothing new, or remembered at import


class Consolidation(BaseModel):
    """Where one conversation's consolidation stands. `detail` says how a done one ended
    ("stored", a reason it was skipped, "imported")."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    conversation_id: str
    status: ConsolidationStatus
    attempts: int = Field(default=0, ge=0)  # failed attempts so far
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    detail: str | None = None
    updated_at: datetime

    @field_validator("agent_id", "conversation_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return _canonical(value, "id")

    @field_validator("last_error", "detail")
    @classmethod
    def _short(cls, value: str | None) -> str | None:
        return None if value is None else value[:MAX_ERROR_CHARS]

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.status is ConsolidationStatus.FAILED and (self.next_attempt_at is None or not self.attempts):
            raise InputError("a failed consolidation needs its attempts and a next attempt time")
        return self


class Watermark(BaseModel):
    """The last message of a conversation that `reader` (graph, observe) has read."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    conversation_id: str
    reader: str = Field(min_length=1, max_length=_READER_CHARS, pattern=r"^[a-z][a-z0-9_-]*$")
    message_id: str
    updated_at: datetime

    @field_validator("agent_id", "conversation_id", "message_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return _canonical(value, "id")


class JobsPort(ABC):
    """Consolidation state: the "consolidation jobs" capability."""

    # consolidation state ---------------------------------------------------------------
    @abstractmethod
    async def get_consolidation(self, agent_id: str, conversation_id: str) -> Consolidation | None: ...

    @abstractmethod
    async def set_consolidation(self, state: Consolidation) -> None:
        """Insert or replace the state of `state.conversation_id`."""

    @abstractmethod
    async def consolidation_pending(self, agent_id: str, conversation_id: str, at: datetime) -> bool:
        """Record a consolidation as pending unless it has a state already; True if it had none."""

    @abstractmethod
    async def consolidations(
        self, status: ConsolidationStatus, *, due_by: datetime | None = None, limit: int = 100
    ) -> list[Consolidation]:
        """Every agent's consolidations in `status`, oldest update first; with `due_by`, only
        those whose next attempt is due by then."""


class WatermarksPort(ABC):
    """Extraction watermarks (`store/unread.py`); mixed into `Store`."""

    @abstractmethod
    async def get_watermark(self, agent_id: str, conversation_id: str, reader: str) -> str | None:
        """The id of the last message `reader` has read in the conversation (None: none yet)."""

    @abstractmethod
    async def set_watermark(self, watermark: Watermark) -> None: ...
