"""The model gateway (ARCHITECTURE §5): the one place a model is called.

`ModelGateway.complete` resolves a task to a model, translates the neutral `Prompt` into
pydantic-ai messages, makes the request (streamed to a token sink when one is given), retries
transient failures, validates structured output, and emits exactly one usage record per
completed round-trip (SPEC App. C). Everything a caller needs comes back as a `Completion`.

Decisions recorded here because callers and doubles depend on them:

- **How a double learns its task.** Every `ModelRequest` the gateway sends carries
  `metadata={TASK_METADATA_KEY: task.value}`. pydantic-ai keeps request metadata in the
  message history it hands a model but never sends it to a provider, so doubles read it
  (`persyn.testing.models.task_of`) while real providers never see it.
- **How structured output is requested.** Schema-constrained, never parsed from free text:
  Anthropic (and the doubles) get an *output tool* whose parameters are the schema, with text
  output disallowed (works on every Claude model); OpenAI and OpenAI-compatible servers
  (`openai:`, `local:`) get *native* JSON-schema output (`response_format` with a JSON
  schema), which llama.cpp's server and vLLM enforce with a grammar and OpenAI supports
  directly. Output that still fails validation is sent back once with the validation error;
  a second failure raises `ModelError` so the caller can degrade.
- **Prompt caching.** The system instruction goes out as two instruction parts: the stable
  prefix (`Prompt.stable_prefix_chars`) as a static part and the rest as a dynamic part. The
  Anthropic model (see `gateway/anthropic.py`) places a cache breakpoint after the static part
  and on the tool definitions; OpenAI-shaped models merge the parts into one system message.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import logging
import random
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ValidationError
from pydantic_ai import exceptions as ai_errors
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import (
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    PartDeltaEvent,
    PartStartEvent,
    RetryFeedbackPart,
    RetryInfo,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from persyn.core.clock import Clock, SystemClock
from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import ModelError, ModelUnavailableError
from persyn.core.ids import derived_id, id_time, is_id, new_id
from persyn.gateway.base import (
    AgentTurn,
    Completion,
    Prompt,
    SinkCallable,
    SinkEvent,
    TokenUsage,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserTurn,
)
from persyn.gateway.registry import ModelSpec, parse_model_string
from persyn.usage import context as usage_context
from persyn.usage.meter import Meter
from persyn.usage.pricing import cost_usd, price_for
from persyn.usage.records import UsageRecord

__all__ = [
    "OUTPUT_TOOL_NAME",
    "TASK_METADATA_KEY",
    "CallUsage",
    "LocalModelFactory",
    "ModelGateway",
    "instruction_parts",
    "to_messages",
]

log = logging.getLogger(__name__)

TASK_METADATA_KEY = "persyn_task"
OUTPUT_TOOL_NAME = "final_result"

LocalModelFactory = Callable[[ModelSpec], Model]
OutputMode = Literal["tool", "native", "json_object"]

_MAX_RETRY_AFTER_SECONDS = 30.0
_ROUND_COUNTERS = 4096  # step executions remembered for usage-id rounds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


@dataclass
class CallUsage:
    """What one `complete` call has used so far: every round-trip that returned (and was
    metered) is added as it returns, so a call that then raises — structured output invalid
    twice, the corrective round-trip failing — still shows what it spent. A wrapper that
    charges for calls (the autonomy budget) reads it however the call ended."""

    usage: TokenUsage = field(default_factory=TokenUsage)

    def add(self, more: TokenUsage) -> None:
        self.usage = _add_usage(self.usage, more)


class ModelGateway:
    """Calls models for one agent; the single chokepoint for metering (SPEC App. C).

    Built models are cached per spec and entered (their HTTP clients opened) on first use;
    `aclose()` closes them. `local_factory` builds `local:` models (the runtime serves them
    through llama.cpp's OpenAI-compatible server); without one, `local:` is an error.
    """

    def __init__(
        self,
        settings: Settings,
        agent: AgentConfig,
        meter: Meter,
        local_factory: LocalModelFactory | None = None,
        clock: Clock | None = None,
        *,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 8.0,
    ) -> None:
        self._settings = settings
        self._agent = agent
        self._meter = meter
        self._local_factory = local_factory
        self._clock: Clock = clock or SystemClock()
        self._retry_base_delay = retry_base_delay
        self._retry_max_delay = retry_max_delay
        self._specs: dict[Task, tuple[str, ModelSpec]] = {}
        self._models: dict[ModelSpec, Model] = {}
        self._entered: list[Model] = []
        self._rounds: OrderedDict[int, tuple[usage_context.Attribution, int]] = OrderedDict()
        self._json_object_specs: set[ModelSpec] = set()

    # models -----------------------------------------------------------------------------
    def spec_for(self, task: Task) -> ModelSpec:
        """The model `task` runs on for this agent (`auto` resolved)."""
        return self._resolve(task)[1]

    def _resolve(self, task: Task) -> tuple[str, ModelSpec]:
        cached = self._specs.get(task)
        if cached is None:
            raw = self._settings.model_for(self._agent, task)
            cached = (raw, parse_model_string(raw, self._settings.secrets, task))
            self._specs[task] = cached
        return cached

    async def _model_for(self, spec: ModelSpec) -> Model:
        model = self._models.get(spec)
        if model is None:
            model = self._build(spec)
            self._models[spec] = model
            self._entered.append(model)
            await model.__aenter__()
        return model

    def _build(self, spec: ModelSpec) -> Model:
        timeout = self._settings.models.request_timeout_seconds
        secrets = self._settings.secrets
        # Provider SDKs are imported on first use: together they cost seconds of start-up.
        if spec.provider == "anthropic":
            from persyn.gateway.anthropic import build_anthropic_model

            key = secrets.anthropic_api_key
            api_key = key.get_secret_value() if key is not None else None
            return build_anthropic_model(spec.name, spec.base_url, api_key, timeout)
        if spec.provider == "openai":
            from persyn.gateway.openai import build_openai_model

            key = secrets.openai_api_key
            # A custom server gets no OpenAI key: it would leak the key to a third party.
            api_key = key.get_secret_value() if key is not None and spec.base_url is None else None
            return build_openai_model(spec.name, spec.base_url, api_key, timeout)
        if spec.provider == "local":
            if self._local_factory is None:
                raise ModelError(
                    f"model {str(spec)!r} needs the local model server, which is not running in this process"
                )
            return self._local_factory(spec)
        from persyn.testing.models import build_double  # only when a test double is configured

        return build_double(spec)

    async def aclose(self) -> None:
        """Close the HTTP clients of every model this gateway opened."""
        entered, self._entered = self._entered, []
        self._models.clear()
        for model in entered:
            try:
                await model.__aexit__(None, None, None)
            except Exception:
                log.warning("closing model %r failed", model.model_name, exc_info=True)

    # the call ---------------------------------------------------------------------------
    async def complete(
        self,
        task: Task,
        prompt: Prompt,
        *,
        tools: Sequence[ToolSpec] = (),
        output: type[BaseModel] | None = None,
        sink: SinkCallable | None = None,
        phase: str = "draft",
        stage: str | None = None,
        used: CallUsage | None = None,
    ) -> Completion:
        """One model call for `task`; with `output`, a validated instance of it.

        `stage` labels the usage records (default: the task), e.g. "critique:provenance".

        Text deltas go to `sink` as they stream (not for structured output, which is not
        presentable text). Raises `ModelError` when the model fails after retries or its
        structured output is still invalid after one corrective round-trip. `usage` sums
        every round-trip this call made; `usage_id` is the last one's record. `used`, when
        given, accumulates the same sum as each round-trip returns, so the caller sees what
        a call that raised spent (the usage records of those round-trips were emitted).
        """
        raw, spec = self._resolve(task)
        model = await self._model_for(spec)
        mode = self._output_mode(spec)
        params = _request_parameters(prompt, tools, output, mode)
        messages = to_messages(prompt, task)
        used = used if used is not None else CallUsage()
        usage = TokenUsage()
        for attempt in range(2):
            try:
                response, usage_id = await self._round_trip(
                    model, spec, raw, task, messages, params, None if output else sink, phase, stage
                )
            except ModelError as exc:
                if output is None or mode != "native" or not _rejects_json_schema(exc):
                    raise
                # An OpenAI-compatible server without `json_schema` response formats
                # (llama-cpp-python's): use its `json_object` + schema grammar from now on.
                log.info("model %s rejects json_schema output; using json_object with a schema", spec)
                self._json_object_specs.add(spec)
                mode = "json_object"
                params = _request_parameters(prompt, tools, output, mode)
                response, usage_id = await self._round_trip(
                    model, spec, raw, task, messages, params, None, phase, stage
                )
            round_trip = _token_usage(response.usage)
            used.add(round_trip)
            usage = _add_usage(usage, round_trip)
            text = response.text or ""
            calls = tuple(
                ToolCall(id=part.tool_call_id, name=part.tool_name, args=part.args_as_dict())
                for part in response.parts
                if isinstance(part, ToolCallPart) and part.tool_name != OUTPUT_TOOL_NAME
            )
            if output is None:
                return Completion(
                    text=text, tool_calls=calls, usage=usage, model=str(spec), usage_id=usage_id
                )
            try:
                value = _parse_output(response, output, mode)
            except _InvalidOutput as exc:
                if attempt:
                    raise ModelError(
                        f"model {str(spec)!r} returned invalid {output.__name__} output twice for task "
                        f"{task.value!r}: {exc.reason}"
                    ) from exc
                log.info("model %s returned invalid %s output; retrying once", spec, output.__name__)
                messages = [*messages, response, _with_task(ModelRequest(parts=exc.feedback), task)]
                continue
            return Completion(
                text=text, tool_calls=calls, output=value, usage=usage, model=str(spec), usage_id=usage_id
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _max_tokens(self, spec: ModelSpec) -> int:
        """A bound on every reply: a tiny local model otherwise rambles for minutes."""
        models = self._settings.models
        return models.local_max_output_tokens if spec.provider == "local" else models.max_output_tokens

    def _output_mode(self, spec: ModelSpec) -> OutputMode:
        if spec.provider in ("anthropic", "test"):
            return "tool"
        if spec.provider == "local" or spec in self._json_object_specs:
            return "json_object"  # our llama.cpp server (see gateway/local.py)
        return "native"

    async def _round_trip(
        self,
        model: Model,
        spec: ModelSpec,
        raw: str,
        task: Task,
        messages: list[ModelMessage],
        params: ModelRequestParameters,
        sink: SinkCallable | None,
        phase: str,
        stage: str | None = None,
    ) -> tuple[ModelResponse, str | None]:
        """One request, retried with backoff on 429, 5xx, connection errors and timeouts."""
        max_retries = self._settings.models.max_retries
        attempt = 0
        while True:
            progress = _StreamProgress()
            try:
                response = await self._request(
                    model, messages, params, sink, phase, progress, self._max_tokens(spec)
                )
            except ModelError:
                raise
            except Exception as exc:
                # Text already shown through the sink cannot be taken back: do not repeat it.
                if not _retryable(exc) or attempt >= max_retries or progress.forwarded:
                    raise _failure(spec, exc, attempt + 1) from exc
                delay = self._backoff(attempt, exc)
                log.info("model %s failed (%s); retry %d in %.2fs", spec, _describe(exc), attempt + 1, delay)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            return response, self._meter_round_trip(spec, raw, task, response.usage, stage)

    async def _request(
        self,
        model: Model,
        messages: list[ModelMessage],
        params: ModelRequestParameters,
        sink: SinkCallable | None,
        phase: str,
        progress: _StreamProgress,
        max_tokens: int,
    ) -> ModelResponse:
        settings = _model_settings(params, max_tokens)
        if sink is None:
            return await model_request(
                model, messages, model_settings=settings, model_request_parameters=params, instrument=False
            )
        async with model_request_stream(
            model, messages, model_settings=settings, model_request_parameters=params, instrument=False
        ) as stream:
            async for event in stream:
                delta = _delta_text(event)
                if delta:
                    progress.forwarded = True
                    await _notify(sink, SinkEvent(phase=phase, kind="delta", text=delta))
            response = stream.get()
        await _notify(sink, SinkEvent(phase=phase, kind="end"))
        return response

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Exponential backoff with jitter (half fixed, half random), honouring Retry-After."""
        ceiling = min(self._retry_max_delay, self._retry_base_delay * (2**attempt))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            delay = max(delay, min(float(retry_after), _MAX_RETRY_AFTER_SECONDS))
        return delay

    # metering ---------------------------------------------------------------------------
    def _meter_round_trip(
        self, spec: ModelSpec, raw: str, task: Task, usage: RequestUsage, stage: str | None = None
    ) -> str | None:
        """Emit this round-trip's usage record; never raises (metering is fail-soft, SPEC §7)."""
        try:
            attribution = usage_context.current()
            now = self._clock.now()
            tokens = _token_usage(usage)
            record = UsageRecord(
                id=new_id(now),
                call_id=self._call_id(attribution),
                at=now,
                agent_id=attribution.agent_id or self._agent.id,
                stage=stage or task.value,
                model=str(spec),
                tier=spec.tier,
                input_tokens=tokens.input_tokens,
                output_tokens=tokens.output_tokens,
                cache_read_tokens=tokens.cache_read_tokens,
                cache_write_tokens=tokens.cache_write_tokens,
                surface=attribution.surface,
                channel=attribution.channel,
                thread_id=attribution.thread_id,
                conversation_id=attribution.conversation_id,
                cost_usd=cost_usd(
                    price_for(self._settings.prices, str(spec), raw),
                    input_tokens=tokens.input_tokens,
                    output_tokens=tokens.output_tokens,
                    cache_read_tokens=tokens.cache_read_tokens,
                    cache_write_tokens=tokens.cache_write_tokens,
                ),
            )
            self._meter.emit(record)
        except Exception:
            log.warning("could not meter a call to %s", spec, exc_info=True)
            return None
        return record.id

    def _call_id(self, attribution: usage_context.Attribution) -> str | None:
        """Inside a durable step, the logical call: derived from the step and the round.

        Every physical call gets a fresh record id (two calls are two bills, and the ledger
        counts each); this one is what a step run again shares with its first run. A re-run
        step re-binds its attribution (a new object), so its rounds count from zero again and
        its calls get the same call ids, which is how the ledger shows a repeated call. The
        id's time part is the workflow's start (its id is a ULID), not the wall clock, which
        differs on a re-run.
        """
        step_key = attribution.step_key
        if step_key is None:
            return None
        key = id(attribution)
        entry = self._rounds.get(key)
        round_no = entry[1] if entry is not None and entry[0] is attribution else 0
        self._rounds[key] = (attribution, round_no + 1)
        self._rounds.move_to_end(key)
        while len(self._rounds) > _ROUND_COUNTERS:
            self._rounds.popitem(last=False)
        workflow = step_key.split(":", 1)[0]
        anchor = id_time(workflow) if is_id(workflow) else _EPOCH
        return derived_id(anchor, step_key, str(round_no))


# prompt translation -----------------------------------------------------------------------
def instruction_parts(prompt: Prompt) -> list[InstructionPart]:
    """The system instruction as a static (stable) part and a dynamic (volatile) part."""
    split = max(0, min(prompt.stable_prefix_chars, len(prompt.system)))
    stable, volatile = prompt.system[:split].rstrip(), prompt.system[split:].strip()
    parts: list[InstructionPart] = []
    if stable:
        parts.append(InstructionPart(content=stable))
    if volatile:
        parts.append(InstructionPart(content=volatile, dynamic=True))
    return parts


def to_messages(prompt: Prompt, task: Task) -> list[ModelMessage]:
    """The dialog as pydantic-ai messages; consecutive turns of one side share a message."""
    messages: list[ModelMessage] = []
    request_parts: list[ModelRequestPart] = []
    response_parts: list[ModelResponsePart] = []

    def flush_request() -> None:
        if request_parts:
            messages.append(_with_task(ModelRequest(parts=list(request_parts)), task))
            request_parts.clear()

    def flush_response() -> None:
        if response_parts:
            messages.append(ModelResponse(parts=list(response_parts)))
            response_parts.clear()

    for item in prompt.items:
        if isinstance(item, AgentTurn):
            flush_request()
            if item.text:
                response_parts.append(TextPart(content=item.text))
            response_parts.extend(
                ToolCallPart(tool_name=call.name, args=dict(call.args), tool_call_id=call.id)
                for call in item.tool_calls
            )
        else:
            flush_response()
            request_parts.append(_request_part(item))
    flush_response()
    flush_request()
    if not messages or not isinstance(messages[-1], ModelRequest):
        # A request must end with something for the model to answer.
        messages.append(_with_task(ModelRequest(parts=[UserPromptPart(content="(Continue.)")]), task))
    return messages


def _request_part(item: UserTurn | ToolResult) -> ModelRequestPart:
    if isinstance(item, ToolResult):
        return ToolReturnPart(
            tool_name=item.name,
            content=item.content,
            tool_call_id=item.call_id,
            outcome="failed" if item.is_error else "success",
        )
    text = f"[{item.name}] {item.text}" if item.name else item.text
    return UserPromptPart(content=text)


def _with_task(request: ModelRequest, task: Task) -> ModelRequest:
    request.metadata = {**(request.metadata or {}), TASK_METADATA_KEY: task.value}
    return request


@functools.lru_cache(maxsize=64)
def _cached_json_schema(output: type[BaseModel]) -> dict[str, Any]:
    return output.model_json_schema()


def _json_schema(output: type[BaseModel]) -> dict[str, Any]:
    """The output type's JSON schema: generated once per type (it is the same every call and
    costs about half a millisecond), copied so a caller may change its own."""
    return copy.deepcopy(_cached_json_schema(output))


def _request_parameters(
    prompt: Prompt, tools: Sequence[ToolSpec], output: type[BaseModel] | None, mode: OutputMode
) -> ModelRequestParameters:
    base = ModelRequestParameters(
        function_tools=[
            ToolDefinition(name=t.name, description=t.description, parameters_json_schema=dict(t.parameters))
            for t in tools
        ],
        instruction_parts=instruction_parts(prompt),
    )
    if output is None:
        return base
    schema = _json_schema(output)
    description = (output.__doc__ or "").strip() or f"The {output.__name__} result."
    if mode == "tool":
        tool = ToolDefinition(
            name=OUTPUT_TOOL_NAME, description=description, parameters_json_schema=schema, kind="output"
        )
        return replace(base, output_mode="tool", output_tools=[tool], allow_text_output=False)
    definition = OutputObjectDefinition(json_schema=schema, name=output.__name__, description=description)
    if mode == "json_object":
        # The schema is in the instructions (prompted output) and, through `_model_settings`,
        # in llama.cpp's `json_object` response format, which it enforces with a grammar.
        return replace(base, output_mode="prompted", output_object=definition, allow_text_output=True)
    return replace(base, output_mode="native", output_object=definition, allow_text_output=True)


def _model_settings(params: ModelRequestParameters, max_tokens: int) -> ModelSettings:
    settings = ModelSettings(max_tokens=max_tokens)
    if params.output_mode == "prompted" and params.output_object is not None:
        response_format = {"type": "json_object", "schema": params.output_object.json_schema}
        settings["extra_body"] = {"response_format": response_format}
    return settings


def _rejects_json_schema(exc: ModelError) -> bool:
    """Whether a failure says the server does not support `json_schema` response formats."""
    text = f"{exc} {exc.__cause__ or ''}".lower()
    return "json_schema" in text and ("response_format" in text or "literal_error" in text)


# structured output ------------------------------------------------------------------------
class _InvalidOutput(Exception):
    """Output that failed validation, with the request parts that tell the model why."""

    def __init__(self, reason: str, feedback: list[ModelRequestPart]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.feedback = feedback


def _parse_output(response: ModelResponse, output: type[BaseModel], mode: OutputMode) -> BaseModel:
    retry: RetryInfo[Literal["validation_error"]] = RetryInfo("validation_error", attempt=1, max_retries=1)
    calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
    output_call = next((call for call in calls if call.tool_name == OUTPUT_TOOL_NAME), None)
    if output_call is not None:
        try:
            if isinstance(output_call.args, str):
                return output.model_validate_json(output_call.args)
            return output.model_validate(output_call.args or {})
        except ValidationError as exc:
            feedback: list[ModelRequestPart] = [
                ToolReturnPart(
                    tool_name=call.tool_name,
                    content=(
                        f"Invalid arguments: {_errors_text(exc)}. Call {OUTPUT_TOOL_NAME} again with "
                        "arguments that match its schema."
                        if call is output_call
                        else f"Not run: answer by calling {OUTPUT_TOOL_NAME}."
                    ),
                    tool_call_id=call.tool_call_id,
                    outcome="retried" if call is output_call else "failed",
                )
                for call in calls
            ]
            raise _InvalidOutput(_errors_text(exc), feedback) from exc
    text = _unfence(response.text or "")
    try:
        return output.model_validate_json(text)
    except ValidationError as exc:
        if mode == "tool" and not calls:
            reason = f"no {OUTPUT_TOOL_NAME} call and the text is not valid JSON ({_errors_text(exc)})"
            content = f"Respond by calling the {OUTPUT_TOOL_NAME} tool with arguments that match its schema."
            raise _InvalidOutput(reason, [RetryFeedbackPart(content=content, retry=retry)]) from exc
        if calls:
            # The model called a function tool instead of answering: answer those calls.
            parts: list[ModelRequestPart] = [
                ToolReturnPart(
                    tool_name=call.tool_name,
                    content="Not run: answer with the requested JSON instead.",
                    tool_call_id=call.tool_call_id,
                    outcome="failed",
                )
                for call in calls
            ]
            raise _InvalidOutput(f"tool calls instead of output ({_errors_text(exc)})", parts) from exc
        raise _InvalidOutput(
            _errors_text(exc), [RetryFeedbackPart(content=exc.errors(include_url=False), retry=retry)]
        ) from exc


def _unfence(text: str) -> str:
    """Strip a Markdown code fence some local models wrap JSON in despite the schema."""
    match = _FENCE.match(text)
    return match.group("body") if match else text.strip()


def _errors_text(exc: ValidationError) -> str:
    return json.dumps(
        [
            {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False)
        ]
    )


# streaming and errors ---------------------------------------------------------------------
@dataclass
class _StreamProgress:
    """Whether any text reached the sink (after which a failed request is not repeated)."""

    forwarded: bool = False


def _delta_text(event: object) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


async def _notify(sink: SinkCallable, event: SinkEvent) -> None:
    """Best-effort: a sink that raises (sync or async) never reaches generation."""
    try:
        result = sink(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.debug("token sink raised on %s; ignored", event.kind, exc_info=True)


def _retryable(exc: BaseException) -> bool:
    """429, 5xx, connection failures and timeouts are worth another try; other 4xx are not."""
    if "json_schema" in str(exc).lower():
        return False  # an unsupported response format will not start working on a retry
    if isinstance(exc, ai_errors.ModelHTTPError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(
        exc,
        ai_errors.ModelRateLimitError
        | ai_errors.ModelUnavailableError
        | ai_errors.ModelServerError
        | ai_errors.ModelConnectionError
        | ai_errors.ModelRequestTimeout
        | httpx.TransportError
        | ConnectionError
        | TimeoutError,
    )


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status} " if isinstance(status, int) else ""
    return f"{prefix}{type(exc).__name__}: {exc}"


def _failure(spec: ModelSpec, exc: Exception, attempts: int) -> ModelError:
    message = f"model {str(spec)!r} failed after {attempts} attempt(s): {_describe(exc)}"
    if isinstance(exc, ai_errors.ModelConnectionError | httpx.TransportError | ConnectionError):
        return ModelUnavailableError(message)
    return ModelError(message)


# usage ------------------------------------------------------------------------------------
def _token_usage(usage: RequestUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def _add_usage(left: TokenUsage, right: TokenUsage) -> TokenUsage:
    fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    return TokenUsage(**{name: getattr(left, name) + getattr(right, name) for name in fields})
