"""The outbox sub-port (ARCHITECTURE §3, turn 2): every message the agent sends is written
here before any surface is given it, so it reaches its channel whichever process sends it.

A row's id *is* its idempotency key: a ULID derived from what is sent (the event a reply
answers, the tool call that sent a message), so a replayed transmit step writes the same
row and `put_outbox` keeps the first. Rows are delivered at least once: a row is marked
delivered only after an adapter took it, and adapters deduplicate by the id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from persyn.core.ids import is_id

__all__ = ["MAX_OUTBOX_TEXT", "OutboxPort", "OutboxRow"]

MAX_OUTBOX_TEXT = 100_000


class OutboxRow(BaseModel):
    """One message on its way to a surface (service + channel) for one agent."""

    model_config = ConfigDict(frozen=True)

    id: str  # the idempotency key (a derived ULID)
    agent_id: str
    service: str = Field(min_length=1, max_length=200)
    channel: str = Field(min_length=1, max_length=500)
    conversation_id: str
    message_id: str
    event_id: str  # the event answered, or the run that initiated the message
    text: str = Field(max_length=MAX_OUTBOX_TEXT)
    created_at: datetime
    delivered_at: datetime | None = None
    attempts: int = Field(default=0, ge=0)  # failed deliveries so far
    last_error: str | None = Field(default=None, max_length=2000)

    @field_validator("id", "agent_id", "conversation_id", "message_id", "event_id")
    @classmethod
    def _canonical_ulid(cls, value: str) -> str:
        if not is_id(value):
            raise ValueError(f"invalid outbox id {value!r}: expected a 26-character ULID")
        canonical = value.upper()
        if canonical != value:
            raise ValueError(f"id {value!r} is not canonical (upper case): {canonical!r}")
        return value


class OutboxPort(ABC):
    """Durable, ordered, per (agent, service) queues of what the agent sends."""

    @abstractmethod
    async def put_outbox(self, row: OutboxRow) -> OutboxRow:
        """Write `row` unless a row with its id exists; return the stored row (the first
        one written under that id, whatever `row` says)."""

    @abstractmethod
    async def get_outbox(self, agent_id: str, row_id: str) -> OutboxRow | None: ...

    @abstractmethod
    async def pending_outbox(self, agent_id: str, service: str, *, limit: int = 100) -> list[OutboxRow]:
        """Undelivered rows for `service`, in the order written (created_at, then id)."""

    @abstractmethod
    async def mark_outbox_delivered(self, agent_id: str, row_id: str, at: datetime) -> bool:
        """Record that an adapter took the row; False if it was delivered already (or is
        unknown), so two deliverers racing learn which one marked it."""

    @abstractmethod
    async def outbox_failed(self, agent_id: str, row_id: str, error: str) -> None:
        """Count a failed delivery (it stays pending and is retried)."""

    @abstractmethod
    async def purge_outbox(self, before: datetime) -> int:
        """Delete the rows written before `before`, delivered or not; return how many."""
