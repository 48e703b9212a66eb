"""One model-call span per round trip, with [tracing] on (SPEC App. D)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.usage import RequestUsage

from persyn.gateway.base import MODEL_METADATA_KEY, USAGE_ID_METADATA_KEY
from persyn.gateway.registry import ModelSpec
from persyn.gateway.wrappers.base import Call, Reply, RoundTripModel, stage_of
from persyn.gateway.wrappers.metered import token_usage
from persyn.tracing import ModelCallSpan, Tracing

__all__ = ["TracedModel"]


class TracedModel(RoundTripModel):
    """One model-call span per round-trip (SPEC App. D): the stage, the model, the tokens
    (cached ones apart), the latency, the usage record's id and — by the content policy —
    the messages, the tools offered and the output. Never changes the call: a span that
    cannot be recorded is the tracer's loss, not the turn's. A call that failed leaves the
    span with its error (`model_call` records it)."""

    def __init__(self, wrapped: Model, *, spec: ModelSpec, tracing: Tracing) -> None:
        super().__init__(wrapped)
        self._spec = spec
        self._tracing = tracing

    @asynccontextmanager
    async def _round_trip(self, call: Call[Reply]) -> AsyncGenerator[Reply]:
        with self._tracing.model_call(stage_of(call.messages), str(self._spec)) as span:
            _traced_request(span, call.messages, call.params)
            async with call.to(self.wrapped) as reply:
                yield reply
            # metering, inside, stamped the metadata
            _traced_response(span, reply.usage, reply.metadata, lambda: _response_text(call.response(reply)))


def _traced_request(
    span: ModelCallSpan, messages: list[ModelMessage], params: ModelRequestParameters
) -> None:
    tools = [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters_json_schema}
        for tool in params.function_tools
    ]
    span.request(lambda: _messages_text(messages, params), tools)


def _traced_response(
    span: ModelCallSpan, usage: RequestUsage, metadata: dict[str, Any] | None, output: Any
) -> None:
    stamped = metadata or {}
    tokens = token_usage(usage)
    span.response(
        model=stamped.get(MODEL_METADATA_KEY),
        input_tokens=tokens.input_tokens,
        output_tokens=tokens.output_tokens,
        cache_read_tokens=tokens.cache_read_tokens,
        cache_write_tokens=tokens.cache_write_tokens,
        usage_id=stamped.get(USAGE_ID_METADATA_KEY),
        output=output,
    )


def _messages_text(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    """The request as a reader wants it: one line per part, the instructions first."""
    lines = [f"[system] {part.content}" for part in params.instruction_parts or ()]
    for message in messages:
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                lines.append(f"[system] {part.content}")
            elif isinstance(part, UserPromptPart):
                lines.append(f"[user] {part.content}")
            elif isinstance(part, ToolReturnPart):
                lines.append(f"[tool {part.tool_name}] {part.model_response_str()}")
            elif isinstance(part, TextPart):
                lines.append(f"[assistant] {part.content}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"[assistant calls {part.tool_name}] {part.args_as_json_str()}")
    return "\n".join(lines)


def _response_text(response: ModelResponse) -> str:
    lines: list[str] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            lines.append(part.content)
        elif isinstance(part, ToolCallPart):
            lines.append(f"[calls {part.tool_name}] {part.args_as_json_str()}")
    return "\n".join(lines)
