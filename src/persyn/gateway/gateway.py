"""The model gateway (ARCHITECTURE §5): the one place a model is called.

`ModelGateway.complete` resolves a task to its model (or its chain of models), translates the
neutral `Prompt` into pydantic-ai messages, makes the request (streamed to a token sink when
one is given), validates structured output, and returns everything a caller needs as a
`Completion`. What every request goes through — the concurrency limit, retries with backoff,
one usage record per completed round-trip (SPEC App. C), the fallback chain, and whatever the
composition root adds (the autonomy budget) — are model wrappers composed when the gateway
builds a task's model (`gateway/wrappers/`); how providers differ is set on each provider's
model when it is built (`gateway/providers.py`).

Decisions recorded here because callers and doubles depend on them:

- **How a model learns its task.** Every `ModelRequest` the gateway sends carries
  `metadata={TASK_METADATA_KEY: task.value}` (and the usage label, when the caller gave one).
  pydantic-ai keeps request metadata in the message history it hands a model but never sends it
  to a provider, so the metering wrapper and the doubles (`persyn.testing.models.task_of`) read
  it while real providers never see it.
- **How structured output is requested.** Schema-constrained, never parsed from free text: the
  gateway offers both an output tool and an output object (`output_mode='auto'`) and each
  provider's profile picks one — Claude and the doubles an output tool, OpenAI a JSON-schema
  response format, llama.cpp's server `json_object` with the schema. Output that still fails
  validation is sent back once with the validation error; a second failure raises `ModelError`
  so the caller can degrade.
- **Prompt caching.** The system instruction goes out as two instruction parts: the stable
  prefix (`Prompt.stable_prefix_chars`) as a static part and the rest as a dynamic part. The
  Anthropic model (see `gateway/anthropic.py`) places a cache breakpoint after the static part
  and on the tool definitions; OpenAI-shaped models merge the parts into one system message.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic_ai.concurrency import ConcurrencyLimiter
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import (
    BinaryContent,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryInfo,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.concurrency import ConcurrencyLimitedModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.tools import ToolDefinition

from persyn.core.clock import Clock, SystemClock
from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import ModelError
from persyn.gateway.base import (
    MODEL_METADATA_KEY,
    STAGE_METADATA_KEY,
    TASK_METADATA_KEY,
    USAGE_ID_METADATA_KEY,
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
from persyn.gateway.provider_tools import ProviderToolsModel, enabled_provider_tools, native_tools
from persyn.gateway.providers import BuildContext, LocalModelFactory, build_model
from persyn.gateway.registry import ModelSpec, parse_model_string
from persyn.gateway.wrappers import (
    CallMeter,
    FallbackModel,
    MeteredModel,
    RetryingModel,
    TracedModel,
    delta_text,
    token_usage,
)
from persyn.senses.hearing import Transcriber, Transcript
from persyn.tracing import Tracing
from persyn.usage.meter import Meter
from persyn.usage.pricing import audio_cost_usd, price_for

__all__ = [
    "OUTPUT_TOOL_NAME",
    "SPEAK_STAGE",
    "TASK_METADATA_KEY",
    "TRANSCRIBE_STAGE",
    "Admission",
    "CallUsage",
    "LocalModelFactory",
    "ModelGateway",
    "ModelWrapper",
    "instruction_parts",
    "to_messages",
]

log = logging.getLogger(__name__)

OUTPUT_TOOL_NAME = "final_result"

ModelWrapper = Callable[[Model], Model]
"""Wraps a task's whole model (its chain) once, when the gateway builds it."""

Settle = Callable[[float], Awaitable[object]]
"""After an admitted transcription: charges the seconds heard (to a self-initiated run's budget)."""

Admission = Callable[[float], Awaitable[Settle | None]]
"""Before a call that is not a chat round-trip (a transcription of about that many seconds of
audio, as its header says): what the `wrappers` check before each request (the autonomy budget),
raising a `ModelError` to refuse it; what it returns is called with the seconds heard after the
call succeeded (None: nothing to charge)."""

TRANSCRIBE_STAGE = "transcribe"
SPEAK_STAGE = "speak"  # speech synthesized on a live call (`ModelGateway.meter_speech`)

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)

_Chain = tuple[tuple[str, ModelSpec], ...]  # (configured string, spec) per model, in order


@dataclass
class CallUsage:
    """What one `complete` call has used so far: every round-trip that returned (and was
    metered) is added as it returns, so a call that then raises — structured output invalid
    twice, the corrective round-trip failing — still shows what it spent."""

    usage: TokenUsage = field(default_factory=TokenUsage)

    def add(self, more: TokenUsage) -> None:
        self.usage = _add_usage(self.usage, more)


class ModelGateway:
    """Calls models for one agent; the single chokepoint for metering (SPEC App. C).

    A task's model is built once, with its wrappers, and its provider models are entered (their
    HTTP clients opened) on first use; `aclose()` closes them. `local_factory` builds `local:`
    models (the runtime serves them through llama.cpp's OpenAI-compatible server); without one,
    `local:` is an error. `wrappers` wrap each task's model, outermost last. With a `tracing`
    that is enabled, each model is traced too (`TracedModel`).
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
        wrappers: Sequence[ModelWrapper] = (),
        tracing: Tracing | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._settings = settings
        self._admission = admission
        self._tracing = tracing if tracing is not None and tracing.enabled else None
        self._agent = agent
        self._context = BuildContext(settings.models, settings.secrets, local_factory)
        self._meter = CallMeter(
            meter, clock or SystemClock(), agent.id, settings.prices, tiers=settings.models.tiers
        )
        self._retry_base_delay = retry_base_delay
        self._retry_max_delay = retry_max_delay
        self._wrappers = tuple(wrappers)
        self._chains: dict[Task, _Chain] = {}
        self._models: dict[_Chain, Model] = {}
        self._providers: dict[ModelSpec, Model] = {}
        self._limiters: dict[ModelSpec, ConcurrencyLimiter] = {}
        self._tool_mode: dict[str, bool] = {}  # model string → structured output is a tool call
        self._entered: list[Model] = []

    # models -----------------------------------------------------------------------------
    def spec_for(self, task: Task) -> ModelSpec:
        """The model `task` runs on first for this agent (`auto` resolved)."""
        return self._resolve(task)[0][1]

    def _resolve(self, task: Task) -> _Chain:
        chain = self._chains.get(task)
        if chain is None:
            raws = self._settings.models_for(self._agent, task)
            chain = tuple((raw, parse_model_string(raw, self._settings.secrets, task)) for raw in raws)
            self._chains[task] = chain
        return chain

    async def _model_for(self, chain: _Chain) -> Model:
        model = self._models.get(chain)
        if model is None:
            members = [await self._member(raw, spec, in_chain=len(chain) > 1) for raw, spec in chain]
            model = members[0] if len(members) == 1 else FallbackModel(members)
            for wrap in self._wrappers:
                model = wrap(model)
            self._models[chain] = model
        return model

    async def can_see(self, task: Task) -> bool:
        """Whether `task`'s first model takes images, as its provider's profile says
        (`supports_image_input`: false for the bundled `local:` model and the doubles but
        `test:vision`). A model that cannot is never sent one (SPEC §4 step 1)."""
        model = await self._model_for(self._resolve(task))
        return bool(model.profile.get("supports_image_input", True))

    async def transcribe(
        self, transcriber: Transcriber, data: bytes, media_type: str, seconds: float = 0.0
    ) -> Transcript:
        """Audio to text like every model call: admitted first (`admission`, told the
        `seconds` its header declares: the autonomy budget of a self-initiated run; a refusal
        is its `ModelError`), traced (a model span with stage `transcribe`, the model and the
        seconds heard), metered (one usage record, `units` = whole seconds of audio, costed by
        the model's `per_audio_minute` price when the price table has one — a local
        transcription has none) and then charged (the admission's settle, with the seconds
        heard)."""
        settle = await self._admission(seconds) if self._admission is not None else None
        if self._tracing is None:
            transcript = await transcriber.transcribe(data, media_type)
            self._meter_transcript(transcript)
        else:
            with self._tracing.model_call(TRANSCRIBE_STAGE, transcriber.model) as span:
                transcript = await transcriber.transcribe(data, media_type)
                usage_id = self._meter_transcript(transcript)
                span.heard(seconds=transcript.seconds, usage_id=usage_id, output=lambda: transcript.text)
        if settle is not None:
            await settle(transcript.seconds)
        return transcript

    def _meter_transcript(self, transcript: Transcript) -> str | None:
        cost = audio_cost_usd(price_for(self._settings.prices, transcript.model), transcript.seconds)
        return self._meter.record_units(
            transcript.model, TRANSCRIBE_STAGE, math.ceil(transcript.seconds), cost
        )

    def meter_speech(self, model: str, seconds: float) -> str | None:
        """Speech synthesized on a live call, metered as a transcription is: one usage record
        of stage `speak`, `units` = whole seconds of audio, costed by the engine's
        `per_audio_minute` price when the price table has one (a local voice has none)."""
        cost = audio_cost_usd(price_for(self._settings.prices, model), seconds)
        return self._meter.record_units(model, SPEAK_STAGE, math.ceil(seconds), cost)

    async def layers(self, task: Task) -> tuple[str, ...]:
        """The models a call of `task` passes through, outermost first, down to the provider's
        (the first of a chain): the work each call carries besides the model itself."""
        model = await self._model_for(self._resolve(task))
        names: list[str] = []
        while True:
            names.append(type(model).__name__)
            if isinstance(model, FallbackModel):
                model = model.models[0]
            elif isinstance(model, WrapperModel):
                model = model.wrapped
            else:
                return tuple(names)

    async def _member(self, raw: str, spec: ModelSpec, *, in_chain: bool) -> Model:
        """One model of a chain: the provider's (offered only its own provider tools), limited,
        retried, metered and traced."""
        model: Model = ProviderToolsModel(
            await self._provider(spec), enabled_provider_tools(self._settings, raw, str(spec))
        )
        limit = self._settings.models.max_concurrent_requests
        if limit:
            limiter = self._limiters.setdefault(spec, ConcurrencyLimiter(max_running=limit, name=str(spec)))
            model = ConcurrencyLimitedModel(model, limiter)
        model = RetryingModel(
            model,
            label=str(spec),
            max_retries=self._settings.models.max_retries,
            base_delay=self._retry_base_delay,
            max_delay=self._retry_max_delay,
        )
        model = MeteredModel(model, spec=spec, configured=raw, meter=self._meter, record_failures=in_chain)
        if self._tracing is not None:
            model = TracedModel(model, spec=spec, tracing=self._tracing)
        return model

    async def _provider(self, spec: ModelSpec) -> Model:
        model = self._providers.get(spec)
        if model is None:
            model = build_model(spec, self._context)
            self._tool_mode[str(spec)] = model.profile.get("default_structured_output_mode", "tool") == "tool"
            self._providers[spec] = model
            self._entered.append(model)
            await model.__aenter__()
        return model

    async def aclose(self) -> None:
        """Close the HTTP clients of every model this gateway opened."""
        entered, self._entered = self._entered, []
        self._models.clear()
        self._providers.clear()
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
        presentable text). Raises `ModelError` when every model of the task fails after its
        retries or the structured output is still invalid after one corrective round-trip.
        `usage` sums every round-trip this call made; `usage_id` is the last one's record;
        `model` is the model that answered. `used`, when given, accumulates the same sum as
        each round-trip returns, so the caller sees what a call that raised spent (the usage
        records of those round-trips were emitted).
        """
        chain = self._resolve(task)
        model = await self._model_for(chain)
        params = _request_parameters(prompt, tools, output, self._settings.models.provider_tool_max_uses)
        messages = to_messages(prompt, task, stage)
        used = used if used is not None else CallUsage()
        usage = TokenUsage()
        for attempt in range(2):
            response = await _round_trip(model, messages, params, None if output else sink, phase)
            round_trip = token_usage(response.usage)
            used.add(round_trip)
            usage = _add_usage(usage, round_trip)
            resumes = 0
            while response.state == "suspended" and resumes < self._settings.models.max_pause_resumes:
                # The provider paused a long server-tool turn: sending it back as it is lets the
                # model go on. Each resume is a call like any other (metered, budget admitted).
                resumes += 1
                more = await _round_trip(
                    model, [*messages, response], params, None if output else sink, phase
                )
                round_trip = token_usage(more.usage)
                used.add(round_trip)
                usage = _add_usage(usage, round_trip)
                response = _continued(response, more)
            paused = response.state == "suspended"
            if paused:
                log.warning(
                    "model %s still had its turn for task %r paused after %d resume(s) ([models] "
                    "max_pause_resumes): going on with what it said so far",
                    chain[0][1],
                    task.value,
                    resumes,
                )
            metadata = response.metadata or {}
            answered = str(metadata.get(MODEL_METADATA_KEY) or chain[0][1])
            usage_id = metadata.get(USAGE_ID_METADATA_KEY)
            text = response.text or ""
            calls = tuple(
                ToolCall(id=part.tool_call_id, name=part.tool_name, args=part.args_as_dict())
                for part in response.parts
                if isinstance(part, ToolCallPart) and part.tool_name != OUTPUT_TOOL_NAME
            )
            if output is None:
                return Completion(
                    text=text, tool_calls=calls, usage=usage, model=answered, usage_id=usage_id, paused=paused
                )
            try:
                value = _parse_output(response, output, tool_mode=self._tool_mode.get(answered, True))
            except _InvalidOutput as exc:
                if attempt:
                    raise ModelError(
                        f"model {answered!r} returned invalid {output.__name__} output twice for task "
                        f"{task.value!r}: {exc.reason}"
                    ) from exc
                log.info("model %s returned invalid %s output; retrying once", answered, output.__name__)
                messages = [*messages, response, _with_task(ModelRequest(parts=exc.feedback), task, stage)]
                continue
            return Completion(
                text=text,
                tool_calls=calls,
                output=value,
                usage=usage,
                model=answered,
                usage_id=usage_id,
                paused=paused,
            )
        raise AssertionError("unreachable")  # pragma: no cover


async def _round_trip(
    model: Model,
    messages: list[ModelMessage],
    params: ModelRequestParameters,
    sink: SinkCallable | None,
    phase: str,
) -> ModelResponse:
    """One request through the task's wrapped model; streamed to `sink` when there is one."""
    if sink is None:
        return await model_request(model, messages, model_request_parameters=params, instrument=False)
    shown = False
    try:
        async with model_request_stream(
            model, messages, model_request_parameters=params, instrument=False
        ) as stream:
            async for event in stream:
                delta = delta_text(event)
                if delta:
                    shown = True
                    await _notify(sink, SinkEvent(phase=phase, kind="delta", text=delta))
    except ModelError:
        if shown:  # broke off mid-reply (`RetryingModel`): the draft ends where it stopped
            await _notify(sink, SinkEvent(phase=phase, kind="end"))
        raise
    # Read once the stream is closed: the wrappers have metered it and stamped its metadata.
    response = stream.get()
    await _notify(sink, SinkEvent(phase=phase, kind="end"))
    return response


def _continued(paused: ModelResponse, more: ModelResponse) -> ModelResponse:
    """A paused reply with its continuation: one assistant turn, the parts in order (what is
    sent back if it pauses again), the continuation's state, usage and stamps (its record)."""
    return replace(more, parts=[*paused.parts, *more.parts])


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


def to_messages(prompt: Prompt, task: Task, stage: str | None = None) -> list[ModelMessage]:
    """The dialog as pydantic-ai messages; consecutive turns of one side share a message."""
    messages: list[ModelMessage] = []
    request_parts: list[ModelRequestPart] = []
    response_parts: list[ModelResponsePart] = []

    def flush_request() -> None:
        if request_parts:
            messages.append(_with_task(ModelRequest(parts=list(request_parts)), task, stage))
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
        messages.append(_with_task(ModelRequest(parts=[UserPromptPart(content="(Continue.)")]), task, stage))
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
    if item.images:
        return UserPromptPart(
            content=[
                text,
                *(BinaryContent(data=image.data, media_type=image.media_type) for image in item.images),
            ]
        )
    return UserPromptPart(content=text)


def _with_task(request: ModelRequest, task: Task, stage: str | None = None) -> ModelRequest:
    stamp: dict[str, Any] = {TASK_METADATA_KEY: task.value}
    if stage is not None:
        stamp[STAGE_METADATA_KEY] = stage
    request.metadata = {**(request.metadata or {}), **stamp}
    return request


@functools.lru_cache(maxsize=64)
def _cached_json_schema(output: type[BaseModel]) -> dict[str, Any]:
    return output.model_json_schema()


def _json_schema(output: type[BaseModel]) -> dict[str, Any]:
    """The output type's JSON schema: generated once per type (it is the same every call and
    costs about half a millisecond), copied so a caller may change its own."""
    return copy.deepcopy(_cached_json_schema(output))


def _request_parameters(
    prompt: Prompt, tools: Sequence[ToolSpec], output: type[BaseModel] | None, max_uses: int = 5
) -> ModelRequestParameters:
    # A provider tool's native kind is its name; a local tool of that name is its fallback,
    # withheld from a model that runs the provider's (`gateway/provider_tools.py`).
    provided = {t.name for t in tools if t.provider}
    base = ModelRequestParameters(
        function_tools=[
            ToolDefinition(
                name=t.name,
                description=t.description,
                parameters_json_schema=dict(t.parameters),
                unless_native=t.name if t.name in provided else None,
            )
            for t in tools
            if not t.provider
        ],
        native_tools=native_tools(tools, max_uses),
        instruction_parts=instruction_parts(prompt),
    )
    if output is None:
        return base
    schema = _json_schema(output)
    description = (output.__doc__ or "").strip() or f"The {output.__name__} result."
    # Both forms of the schema; the provider's profile picks one (`default_structured_output_mode`)
    # and pydantic-ai drops the other, so a chain of different providers shares one request.
    tool = ToolDefinition(
        name=OUTPUT_TOOL_NAME, description=description, parameters_json_schema=schema, kind="output"
    )
    definition = OutputObjectDefinition(json_schema=schema, name=output.__name__, description=description)
    return replace(base, output_mode="auto", output_tools=[tool], output_object=definition)


# structured output ------------------------------------------------------------------------
class _InvalidOutput(Exception):
    """Output that failed validation, with the request parts that tell the model why."""

    def __init__(self, reason: str, feedback: list[ModelRequestPart]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.feedback = feedback


def _parse_output(response: ModelResponse, output: type[BaseModel], *, tool_mode: bool) -> BaseModel:
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
        if tool_mode and not calls:
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


# streaming ---------------------------------------------------------------------------------
async def _notify(sink: SinkCallable, event: SinkEvent) -> None:
    """Best-effort: a sink that raises (sync or async) never reaches generation."""
    try:
        result = sink(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.debug("token sink raised on %s; ignored", event.kind, exc_info=True)


# usage ------------------------------------------------------------------------------------
def _add_usage(left: TokenUsage, right: TokenUsage) -> TokenUsage:
    fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    return TokenUsage(**{name: getattr(left, name) + getattr(right, name) for name in fields})
