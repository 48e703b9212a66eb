"""The model-calls sub-port: completed model calls the gateway checkpointed inside a durable
step (ARCHITECTURE §4, §8), so one DBOS step may span several calls without billing any of
them twice when the step is run again after a crash.

A row is one logical call, keyed by the step's identity and the call's index in it
(`call_key`, e.g. `<workflow id>:<step id>/0`); `response` is the model's answer as the
gateway stored it (pydantic-ai's message JSON). Rows are written once and only read by a
re-run of the same step, so they are purged by age (housekeeping), not per workflow.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MAX_CALL_KEY", "ModelCall", "ModelCallsPort"]

MAX_CALL_KEY = 300


class ModelCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    call_key: str = Field(min_length=1, max_length=MAX_CALL_KEY)
    workflow_id: str = Field(min_length=1, max_length=200)
    response: str = Field(min_length=2)  # JSON
    created_at: datetime


class ModelCallsPort(ABC):
    @abstractmethod
    async def model_call(self, call_key: str) -> str | None:
        """The stored response of the call `call_key`, or None (never checkpointed)."""

    @abstractmethod
    def save_model_call(
        self, call_key: str, workflow_id: str, response: str, at: datetime
    ) -> Awaitable[None]:
        """Queue the call's checkpoint for writing and return its completion to await (or
        not). It is queued when this is called, not when awaited: every write this process
        asks for afterwards commits after it (the store writes in order), so the reply a
        step records later never lands without the calls it came from. A call already
        stored keeps its first response. Bad values raise at once (`ModelCall`)."""

    @abstractmethod
    async def purge_model_calls(self, before: datetime) -> int:
        """Delete checkpoints written before `before`; how many went."""
