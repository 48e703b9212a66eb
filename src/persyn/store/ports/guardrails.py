"""The guardrails sub-port (SPEC §4.10): what the patterns read and what they record.

- `GuardrailEvent`: one trigger, with the actions taken; a `block` lasts until `blocked_until`
  unless lifted. Transmit's hard gate asks `guardrail_blocks` on every transmission.
- `GuardrailCheck`: one classifier call over a subject's window: its window end is the
  watermark (a person is judged again only once they said something new) and its tokens
  count against the daily budget.
- `WindowMessage`: a message of the interaction history with its conversation's surface,
  across conversations (`interaction_window`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GuardrailCheck", "GuardrailEvent", "GuardrailsPort", "SubjectKind", "WindowMessage"]

SubjectKind = Literal["person", "channel", "agent"]


class GuardrailEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    guardrail: str
    subject_kind: SubjectKind
    subject: str  # a person id, a channel key, or "" for the agent itself
    person_id: str | None = None
    service: str | None = None
    channel: str | None = None
    conversation_id: str | None = None
    reason: str
    score: float
    actions: tuple[str, ...] = ()
    detected_at: datetime
    blocked_until: datetime | None = None
    lifted_at: datetime | None = None

    @property
    def scope(self) -> str:
        """Whom a block of this finding stops: "agent" (everyone: only an agent-wide cause, such
        as autonomy), "person ID" or "channel KEY" (the one speaker or channel that caused it)."""
        return "agent" if self.subject_kind == "agent" else f"{self.subject_kind} {self.subject}"

    def blocks_at(self, now: datetime) -> bool:
        """Whether this event's block is in force at `now`."""
        return self.blocked_until is not None and self.lifted_at is None and self.blocked_until > now


class GuardrailCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    guardrail: str
    subject: str
    window_end: datetime
    checked_at: datetime
    tokens: int = Field(ge=0)


class WindowMessage(BaseModel):
    """A message of the interaction history, with where it was said."""

    model_config = ConfigDict(frozen=True)

    id: str
    conversation_id: str
    service: str
    channel: str
    role: str
    person_id: str | None
    speaker_name: str
    text: str
    created_at: datetime
    event_id: str | None


class GuardrailsPort(ABC):
    @abstractmethod
    async def add_guardrail_event(self, event: GuardrailEvent) -> bool:
        """Record a trigger; False when an event of that id is already stored (a replay)."""

    @abstractmethod
    async def guardrail_events(
        self, agent_id: str | None, *, since: datetime | None = None, limit: int = 100
    ) -> list[GuardrailEvent]:
        """Triggers, newest first (every agent's when `agent_id` is None)."""

    @abstractmethod
    async def guardrail_blocks(self, agent_id: str | None, now: datetime) -> list[GuardrailEvent]:
        """The blocks in force at `now` (every agent's when `agent_id` is None), newest first."""

    @abstractmethod
    async def lift_guardrail_block(self, event_id: str, now: datetime) -> GuardrailEvent | None:
        """End a block now (idempotent: the first lift time stays); None if unknown."""

    @abstractmethod
    async def add_guardrail_check(self, check: GuardrailCheck) -> None: ...

    @abstractmethod
    async def last_guardrail_check(
        self, agent_id: str, guardrail: str, subject: str
    ) -> GuardrailCheck | None:
        """The check of `subject` by `guardrail` whose window ends last."""

    @abstractmethod
    async def guardrail_tokens(self, agent_id: str, since: datetime) -> int:
        """Tokens the agent's guardrail classifiers spent since `since`."""

    @abstractmethod
    async def purge_guardrail_checks(self, before: datetime) -> int:
        """Drop the checks made, and the evaluation slots claimed, before `before`."""

    @abstractmethod
    async def claim_guardrail_slot(
        self, agent_id: str, guardrail: str, slot_start: datetime, holder: str, now: datetime
    ) -> bool:
        """Claim the evaluation of `guardrail` for the agent in the period starting at
        `slot_start`: True for exactly one caller per slot, across processes (a conditional
        insert); False when the slot is already claimed."""

    @abstractmethod
    async def interaction_window(
        self, agent_id: str, since: datetime, *, limit: int = 2000
    ) -> list[WindowMessage]:
        """The agent's messages (every conversation) since `since`, oldest first, at most
        the latest `limit`."""
