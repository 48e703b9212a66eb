"""The model gateway's vocabulary (ARCHITECTURE §5): what callers send and get back.

Callers speak in these neutral types; `gateway/` translates them to pydantic-ai messages
for whichever provider the task is bound to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MODEL_METADATA_KEY",
    "STAGE_METADATA_KEY",
    "TASK_METADATA_KEY",
    "USAGE_ID_METADATA_KEY",
    "AgentTurn",
    "Completion",
    "ImageInput",
    "Prompt",
    "PromptItem",
    "SinkEvent",
    "TokenSink",
    "TokenUsage",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "UserTurn",
]


# Request metadata: pydantic-ai keeps it in the history it hands a model and never sends it to a
# provider, so the gateway stamps each request with the task (and the usage label) it serves;
# the metering wrapper and the test doubles read it back.
TASK_METADATA_KEY = "persyn_task"
STAGE_METADATA_KEY = "persyn_stage"
# Response metadata, stamped by the metering wrapper: which model of a chain answered, and the
# id of the usage record it emitted for the round-trip.
MODEL_METADATA_KEY = "persyn_model"
USAGE_ID_METADATA_KEY = "persyn_usage_id"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ImageInput(_Frozen):
    """An image shown to a model with a user turn (the `caption` task): its bytes and sniffed type."""

    model_config = ConfigDict(frozen=True, ser_json_bytes="base64", val_json_bytes="base64")

    data: bytes
    media_type: str


class UserTurn(_Frozen):
    """Something said to the agent (by a person, another agent, or the system on its behalf)."""

    kind: Literal["user"] = "user"
    text: str
    name: str | None = None  # speaker display name, for multi-speaker channels
    images: tuple[ImageInput, ...] = ()  # only to a model whose profile can see (`ModelGateway.can_see`)


class ToolCall(_Frozen):
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict[str, Any])


class AgentTurn(_Frozen):
    """Something the agent said, possibly with tool calls it made."""

    kind: Literal["agent"] = "agent"
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class ToolResult(_Frozen):
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False


PromptItem = UserTurn | AgentTurn | ToolResult


class Prompt(_Frozen):
    """One model request: a single system instruction plus the dialog.

    `system` is the whole instruction; `stable_prefix_chars` says how many of its leading
    characters are stable across turns (identity, standing constraints) so providers that
    support explicit cache markers (Anthropic) can mark the boundary.
    """

    system: str
    items: tuple[PromptItem, ...] = ()
    stable_prefix_chars: int = 0


class ToolSpec(_Frozen):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the input
    # A tool the model provider runs inside its reply (`gateway/provider_tools.py`): offered as a
    # native tool, never called by the tool loop; `parameters` is empty.
    provider: bool = False


class TokenUsage(_Frozen):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class Completion(_Frozen):
    """The result of one model call (its round-trips: a paused reply resumed, output retried).

    `paused` says the provider still had the turn paused when `[models] max_pause_resumes`
    was reached: the text is what it had said by then."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    output: Any = None  # the validated pydantic model when structured output was asked for
    usage: TokenUsage = TokenUsage()
    model: str = ""  # the model string it ran on
    usage_id: str | None = None  # the id of the usage record emitted for this call
    paused: bool = False


class SinkEvent(_Frozen):
    phase: str  # "draft" | "revise" | ...
    kind: Literal["delta", "tool_start", "tool_end", "end"]
    text: str = ""  # a delta's text; a tool event's tool name
    arguments: str = ""  # tool_start: the call's arguments, shortened (for the operator's eyes)
    status: str = ""  # tool_end: the result's status ("ok", "error", ...)


class TokenSink(Protocol):
    """Receives generated text as it streams. Best-effort: errors are swallowed."""

    def __call__(self, event: SinkEvent) -> Awaitable[None] | None: ...


SinkCallable = Callable[[SinkEvent], Awaitable[None] | None]
