"""What a recorded span is, as the local span store keeps it and `persyn traces` reads it.

The attribute keys are this module's constants, shared by whoever writes a span (the tracer's
helpers) and whoever reads one (the CLI), so neither spells a key on its own.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ATTR",
    "ContentPolicy",
    "SpanKind",
    "SpanRecord",
    "TraceSummary",
]


class ContentPolicy(StrEnum):
    """`full`: spans carry prompts, replies, tool arguments and results. `metadata`: stage,
    model, tokens, timing and ids only: no conversation text in any exported byte."""

    FULL = "full"
    METADATA = "metadata"


class SpanKind(StrEnum):
    ACTIVATION = "activation"  # the root of a turn (message, reminder, heartbeat)
    BACKGROUND = "background"  # work a turn spawned (deliberation, extraction, consolidation)
    MODEL = "model"  # one model call at the gateway
    TOOL = "tool"  # one tool call


class ATTR:
    """Attribute keys. Token counts use the GenAI semantic conventions' names."""

    KIND = "persyn.span.kind"
    AGENT = "persyn.agent_id"
    EVENT = "persyn.event_id"
    ACTIVATION_KIND = "persyn.activation.kind"  # message | reminder | heartbeat
    SURFACE = "persyn.surface"
    CHANNEL = "persyn.channel"
    PARTICIPANT = "persyn.participant"
    PARTICIPANT_NAME = "persyn.participant.name"  # full content only
    CONVERSATION = "persyn.conversation_id"
    THREAD = "persyn.thread_id"
    MODE = "persyn.mode"
    INPUT = "persyn.input"  # full content only
    OUTPUT = "persyn.output"  # full content only
    TRANSMITTED = "persyn.transmitted"
    ACTION = "persyn.action"
    REASON = "persyn.reason"  # full content only
    STAGE = "persyn.stage"
    AUDIO_SECONDS = "persyn.audio_seconds"  # a transcription's length
    MODEL = "gen_ai.request.model"
    ANSWERED_BY = "gen_ai.response.model"
    INPUT_TOKENS = "gen_ai.usage.input_tokens"
    OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
    CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
    CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
    USAGE_ID = "persyn.usage_id"
    TOOLS_OFFERED = "persyn.tools.offered"  # names
    TOOL_DEFINITIONS = "persyn.tools.definitions"  # full content only
    TOOL = "persyn.tool.name"
    TOOL_ARGUMENTS = "persyn.tool.arguments"  # full content only
    TOOL_RESULT = "persyn.tool.result"  # full content only
    TOOL_STATUS = "persyn.tool.status"
    ERROR = "persyn.error"  # the error's type; its message too with full content


AttributeValue = str | bool | int | float | list[str] | list[int] | list[float] | list[bool]


class SpanRecord(BaseModel):
    """One finished span as the local store keeps it (one JSON line)."""

    model_config = ConfigDict(frozen=True)

    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str | None
    name: str
    start: datetime
    end: datetime
    status: str  # "ok" | "error" | "unset"
    attributes: dict[str, AttributeValue]

    @property
    def kind(self) -> str:
        return str(self.attributes.get(ATTR.KIND, ""))

    @property
    def duration_ms(self) -> float:
        return (self.end - self.start).total_seconds() * 1000

    def int_attribute(self, key: str) -> int:
        value = self.attributes.get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def text_attribute(self, key: str) -> str | None:
        value = self.attributes.get(key)
        return value if isinstance(value, str) else None


class TraceSummary(BaseModel):
    """One trace in `persyn traces list`: its root, its size and what it cost."""

    model_config = ConfigDict(frozen=True)

    trace_id: str
    event_id: str | None
    name: str
    kind: str
    agent_id: str | None
    surface: str | None
    participant: str | None
    start: datetime
    duration_ms: float
    spans: int
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    outcome: str | None  # the action the turn ended with (speak, silent, ...)
