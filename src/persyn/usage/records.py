"""The usage record (SPEC App. C): one per completed model call, counted exactly once."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["UsageRecord"]


class UsageRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str  # ULID, one per physical model call (the ledger's dedup key: a line written twice counts once)
    at: datetime
    agent_id: str | None
    stage: str  # the Task value, e.g. "respond", "critique"
    model: str  # the model string as configured, e.g. "anthropic:claude-sonnet-4-5"
    tier: str  # "strong" | "cheap": the low-cardinality model tier for counters (SPEC App. C)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    units: int = 0  # non-token units (images, delegated runs); 0 for token-priced calls
    # Requests of tools the provider ran inside the call (e.g. {"web_search": 2}), counted from
    # its usage report (Anthropic's `usage.server_tool_use`); priced by `[prices] per_request`.
    # Left out of a dump when empty, so the ledger lines of calls without any stay as they were.
    tool_requests: dict[str, int] = Field(default_factory=dict[str, int], exclude_if=lambda value: not value)
    surface: str | None = None  # service, e.g. "terminal"
    channel: str | None = None
    thread_id: str | None = None  # the reasoning thread: the workflow id
    conversation_id: str | None = None
    cost_usd: float | None = None  # None = unpriced: counted, not costed
    # What set the call going (low cardinality): a person's "message", the "heartbeat", a
    # "reminder", or background work — "consolidation", "extraction", "emotion", "guardrails",
    # "import", an "eval"'s judge. An image render carries the trigger of the activation that
    # asked for it. None for lines written before it was recorded (and left out of their dump).
    trigger: str | None = Field(default=None, exclude_if=lambda value: value is None)
    # The logical call inside a durable step: derived from the step and the call's round in
    # it, so a step run again (after a crash, by a recovering executor) makes calls with the
    # same call_id but new ids. Each is billed by the provider, so each is counted; the
    # ledger reports them as repeated calls. None outside a durable step.
    call_id: str | None = None
