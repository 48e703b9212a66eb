"""What every model call goes through, as pydantic-ai model wrappers (ARCHITECTURE §5).

Cross-cutting concerns wrap a model; they are not branches inside the gateway. The gateway
composes them once per model when it builds it (`ModelGateway._member`), innermost first:

    ConcurrencyLimitedModel  at most `[models] max_concurrent_requests` in flight (0: no limit)
    RetryingModel            backoff on 429, 5xx, connection errors and timeouts; `ModelError` after
    MeteredModel             one usage record per round-trip that returned (SPEC App. C)
    TracedModel              one model-call span per round-trip, with [tracing] on (SPEC App. D)
    FallbackModel            the next model of a task's chain when one failed after its retries

and then any wrappers the composition root adds around the whole chain (the autonomy budget).
Each is a `WrapperModel`, so it forwards everything it does not change (profile, settings,
message preparation) to the model it wraps: output mode and token limits stay the provider
model's own (`gateway/providers.py`).

The limit sits inside the retries, so a request waiting out a backoff holds no slot; metering
sits outside them, so a request retried three times before it returned is one record; the
chain is outside metering, so each attempt is recorded with the model that made it. Tracing
sits just outside metering, beside it: a span covers what the usage record covers (retries
included, in its latency) and carries the record's id, so a span and a ledger line can be
matched; like metering, it is absent when off rather than a branch in every call.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Mapping,
    Sequence,
)
from contextlib import (
    AbstractContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
    nullcontext,
)
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic_ai import exceptions as ai_errors
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from persyn.core.clock import Clock
from persyn.core.config import Price
from persyn.core.errors import ModelError, ModelUnavailableError
from persyn.core.ids import derived_id, id_time, is_id, new_id
from persyn.gateway.base import (
    MODEL_METADATA_KEY,
    STAGE_METADATA_KEY,
    TASK_METADATA_KEY,
    USAGE_ID_METADATA_KEY,
    TokenUsage,
)
from persyn.gateway.registry import ModelSpec, Tier, model_tier
from persyn.gateway.wrappers.fallback import FallbackModel
from persyn.tracing import ModelCallSpan, Tracing
from persyn.usage import context as usage_context
from persyn.usage.meter import Meter
from persyn.usage.pricing import cost_usd, price_for
from persyn.usage.records import UsageRecord

__all__ = [
    "CallHooks",
    "CallMeter",
    "FallbackModel",
    "HookedModel",
    "MeteredModel",
    "RetryingModel",
    "TracedModel",
    "delta_text",
    "primed",
    "provider_tool_requests",
    "token_usage",
]

log = logging.getLogger(__name__)

_MAX_RETRY_AFTER_SECONDS = 30.0
_ROUND_COUNTERS = 4096  # step executions remembered for usage-id rounds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# retries ----------------------------------------------------------------------------------
class RetryingModel(WrapperModel):
    """Retries transient failures with exponential backoff and jitter, honouring Retry-After;
    anything else, or the last failure, becomes a `ModelError` naming the model.

    A stream is handed to the caller only once it has produced its first text (`primed`):
    a stream that fails before that — while it opens, or accepted and then failing before
    any text, as a provider reporting an overload as its first event does — has shown
    nobody anything, so it is retried like a request (and, failing for good, moves on in a
    fallback chain). A stream that breaks off after its first text is not repeated: that text
    may already be on someone's screen and cannot be taken back, and a second answer would
    say it twice. Its failure is raised, as a `ModelError` saying the reply broke off; the
    gateway closes the sink's draft (an `end` event), and the turn reports that it could not
    produce a reply instead of sending half of one."""

    def __init__(
        self, wrapped: Model, *, label: str, max_retries: int, base_delay: float, max_delay: float
    ) -> None:
        super().__init__(wrapped)
        self._label = label
        self._max_retries = max_retries
        self._base_delay = base_delay
        self._max_delay = max_delay

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        attempt = 0
        while True:
            try:
                return await self.wrapped.request(messages, model_settings, model_request_parameters)
            except ModelError:
                raise
            except Exception as exc:
                await self._after_failure(exc, attempt)
                attempt += 1

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse]:
        attempt = 0
        while True:
            failed: Exception | None = None
            async with AsyncExitStack() as stack:
                try:
                    stream = await stack.enter_async_context(
                        self.wrapped.request_stream(
                            messages, model_settings, model_request_parameters, run_context
                        )
                    )
                    await primed(stream)
                except ModelError:
                    raise
                except Exception as exc:
                    failed = exc
                else:
                    try:
                        yield stream
                    except ModelError:
                        raise
                    except Exception as exc:
                        raise _broke_off(self._label, exc) from exc
                    return
            await self._after_failure(failed, attempt)  # the failed stream is closed first
            attempt += 1

    async def _after_failure(self, exc: Exception, attempt: int) -> None:
        """Wait before the next try, or raise when there is none."""
        if not _retryable(exc) or attempt >= self._max_retries:
            raise _failure(self._label, exc, attempt + 1) from exc
        delay = self._backoff(attempt, exc)
        log.info("model %s failed (%s); retry %d in %.2fs", self._label, _describe(exc), attempt + 1, delay)
        await asyncio.sleep(delay)

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Exponential backoff with jitter (half fixed, half random), honouring Retry-After."""
        ceiling = min(self._max_delay, self._base_delay * (2**attempt))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            delay = max(delay, min(float(retry_after), _MAX_RETRY_AFTER_SECONDS))
        return delay


def _retryable(exc: BaseException) -> bool:
    """429, 5xx, connection failures and timeouts are worth another try; other 4xx are not."""
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


def _broke_off(label: str, exc: Exception) -> ModelError:
    return ModelError(
        f"model {label!r} broke off its streamed reply after it had begun: {_describe(exc)} "
        "(not repeated: what it had streamed was already shown)"
    )


def delta_text(event: object) -> str:
    """The text a stream event adds to the reply (what a token sink is shown), if any."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


async def primed(stream: StreamedResponse) -> None:
    """Read `stream` up to its first event with text (or to its end), and keep what was read
    for the caller, who then iterates the stream as if nothing had been read.

    A failure before any text is raised here, while the request can still be retried or
    fall back. This sets the stream's `_event_iterator`, which `StreamedResponse.__aiter__`
    hands out once set (pydantic-ai 2.68; its own fallback primes a stream the same way):
    `test_stream_breaks.py` notices if that changes, since the caller would then miss the
    events read here."""
    events = aiter(stream)
    read: list[ModelResponseStreamEvent] = []
    async for event in events:
        read.append(event)
        if delta_text(event):
            break

    async def replay() -> AsyncIterator[ModelResponseStreamEvent]:
        for event in read:
            yield event
        async for event in events:
            yield event

    stream._event_iterator = replay()  # pyright: ignore[reportPrivateUsage]


def _failure(label: str, exc: Exception, attempts: int) -> ModelError:
    message = f"model {label!r} failed after {attempts} attempt(s): {_describe(exc)}"
    if isinstance(exc, ai_errors.ModelConnectionError | httpx.TransportError | ConnectionError):
        return ModelUnavailableError(message)
    return ModelError(message)


# metering ---------------------------------------------------------------------------------
@dataclass
class CallMeter:
    """Turns a round-trip into a usage record for one agent's gateway; never raises (metering
    is fail-soft, SPEC §7). Shared by every model the gateway builds, because call ids count
    the rounds of a durable step whichever model serves them."""

    meter: Meter
    clock: Clock
    agent_id: str
    prices: dict[str, Price]
    tiers: Mapping[str, Tier] = field(default_factory=dict[str, Tier])
    _rounds: OrderedDict[int, tuple[usage_context.Attribution, int]] = field(
        default_factory=OrderedDict[int, tuple[usage_context.Attribution, int]]
    )

    def record(self, spec: ModelSpec, configured: str, stage: str, usage: RequestUsage) -> str | None:
        """Emit one usage record; its id, or None when it could not be metered."""
        try:
            attribution = usage_context.current()
            now = self.clock.now()
            tokens = token_usage(usage)
            requests = provider_tool_requests(usage)
            record = UsageRecord(
                id=new_id(now),
                call_id=self._call_id(attribution),
                at=now,
                agent_id=attribution.agent_id or self.agent_id,
                stage=stage,
                model=str(spec),
                tier=model_tier(spec, self.tiers),
                input_tokens=tokens.input_tokens,
                output_tokens=tokens.output_tokens,
                cache_read_tokens=tokens.cache_read_tokens,
                cache_write_tokens=tokens.cache_write_tokens,
                surface=attribution.surface,
                channel=attribution.channel,
                thread_id=attribution.thread_id,
                conversation_id=attribution.conversation_id,
                tool_requests=requests,
                cost_usd=cost_usd(
                    price_for(self.prices, str(spec), configured),
                    input_tokens=tokens.input_tokens,
                    output_tokens=tokens.output_tokens,
                    cache_read_tokens=tokens.cache_read_tokens,
                    cache_write_tokens=tokens.cache_write_tokens,
                    tool_requests=requests,
                ),
            )
            self.meter.emit(record)
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


class RoundTrip(ABC):
    """What a `RoundTripWrapper` does at the end of one round-trip. `returned` gets the final
    usage, the response's metadata and its output (lazily) and returns the metadata to keep;
    `broke` is told the usage of a stream that broke off after it began (None: it never did)."""

    @abstractmethod
    def returned(
        self, usage: RequestUsage, metadata: dict[str, Any] | None, output: Callable[[], str]
    ) -> dict[str, Any] | None: ...

    @abstractmethod
    def broke(self, streamed: RequestUsage | None) -> None: ...


class RoundTripWrapper(WrapperModel):
    """A wrapper around each round-trip, plain or streamed, written once: `_around` is entered
    before the request and yields the `RoundTrip` told how it ended. A stream's end is when it
    was drained and closed (its usage is final then); `returned` runs after the wrapped
    model's own wrappers stamped the metadata."""

    @abstractmethod
    def _around(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> AbstractContextManager[RoundTrip]: ...

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        with self._around(messages, model_request_parameters) as trip:
            try:
                response = await self.wrapped.request(messages, model_settings, model_request_parameters)
            except ModelError:
                trip.broke(None)
                raise
            response.metadata = trip.returned(
                response.usage, response.metadata, lambda: _response_text(response)
            )
            return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse]:
        with self._around(messages, model_request_parameters) as trip:
            opened: StreamedResponse | None = None
            try:
                async with self.wrapped.request_stream(
                    messages, model_settings, model_request_parameters, run_context
                ) as stream:
                    opened = stream
                    yield stream
            except ModelError:
                trip.broke(None if opened is None else opened.usage)
                raise
            stream.metadata = trip.returned(
                stream.usage, stream.metadata, lambda: _response_text(stream.get())
            )


class MeteredModel(RoundTripWrapper):
    """Emits a usage record for every round-trip that returned, labelled with the stage the
    gateway stamped on the request, and stamps the response with the record's id and the
    model string, so the gateway (and a chain's caller) knows which model answered.

    With `record_failures` (a member of a fallback chain), an attempt that failed is recorded
    too, with the tokens it is known to have used (none), so the ledger shows the failover.
    A stream that broke off after it began is recorded with what it streamed (billed)."""

    def __init__(
        self, wrapped: Model, *, spec: ModelSpec, configured: str, meter: CallMeter, record_failures: bool
    ) -> None:
        super().__init__(wrapped)
        self._spec = spec
        self._configured = configured
        self._meter = meter
        self._record_failures = record_failures

    @contextmanager
    def _around(self, messages: list[ModelMessage], params: ModelRequestParameters) -> Generator[RoundTrip]:
        stage = stage_of(messages)

        def record(usage: RequestUsage) -> str | None:
            return self._meter.record(self._spec, self._configured, stage, usage)

        yield _MeteredTrip(record, str(self._spec), self._record_failures)


class _MeteredTrip(RoundTrip):
    def __init__(
        self, record: Callable[[RequestUsage], str | None], model: str, record_failures: bool
    ) -> None:
        self._record = record
        self._model = model
        self._record_failures = record_failures

    def returned(
        self, usage: RequestUsage, metadata: dict[str, Any] | None, output: Callable[[], str]
    ) -> dict[str, Any]:
        return {
            **(metadata or {}),
            MODEL_METADATA_KEY: self._model,
            USAGE_ID_METADATA_KEY: self._record(usage),
        }

    def broke(self, streamed: RequestUsage | None) -> None:
        if streamed is not None:  # it broke off after it began: what it streamed is spent, and billed
            self._record(streamed)
        elif self._record_failures:
            self._record(RequestUsage())


def stage_of(messages: Sequence[ModelMessage]) -> str:
    """The usage label the gateway stamped on the latest request (its task by default)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.metadata:
            stage = message.metadata.get(STAGE_METADATA_KEY) or message.metadata.get(TASK_METADATA_KEY)
            if stage:
                return str(stage)
    return "unknown"


# tracing ----------------------------------------------------------------------------------
class TracedModel(RoundTripWrapper):
    """One model-call span per round-trip (SPEC App. D): the stage, the model, the tokens
    (cached ones apart), the latency, the usage record's id and — by the content policy —
    the messages, the tools offered and the output. Never changes the call: a span that
    cannot be recorded is the tracer's loss, not the turn's."""

    def __init__(self, wrapped: Model, *, spec: ModelSpec, tracing: Tracing) -> None:
        super().__init__(wrapped)
        self._spec = spec
        self._tracing = tracing

    @contextmanager
    def _around(self, messages: list[ModelMessage], params: ModelRequestParameters) -> Generator[RoundTrip]:
        with self._tracing.model_call(stage_of(messages), str(self._spec)) as span:
            _traced_request(span, messages, params)
            yield _TracedTrip(span)


class _TracedTrip(RoundTrip):
    def __init__(self, span: ModelCallSpan) -> None:
        self._span = span

    def returned(
        self, usage: RequestUsage, metadata: dict[str, Any] | None, output: Callable[[], str]
    ) -> dict[str, Any] | None:
        _traced_response(self._span, usage, metadata, output)  # metering, inside, stamped it
        return metadata

    def broke(self, streamed: RequestUsage | None) -> None:
        """The span records the error as it leaves `model_call`."""


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


# hooks ------------------------------------------------------------------------------------
@dataclass
class CallHooks:
    """What a `HookedModel` does about one call: the parameters to send, a stored response to
    answer with instead of calling (`replay`), a context the call runs in, and an awaitable
    step told the response once the call returned (a stream: once drained and closed)."""

    params: ModelRequestParameters
    replay: ModelResponse | None = None
    context: AbstractContextManager[Any] = field(default_factory=nullcontext)
    after: Callable[[ModelResponse], Awaitable[None]] | None = None


class HookedModel(WrapperModel, ABC):
    """A wrapper that acts before and after each call, its plain and streamed forms written
    once: `_hooks` says what to do (`CallHooks`). The checkpoints, the autonomy budget and the
    per-model provider tools are such wrappers."""

    @abstractmethod
    async def _hooks(self, messages: list[ModelMessage], params: ModelRequestParameters) -> CallHooks: ...

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        hooks = await self._hooks(messages, model_request_parameters)
        if hooks.replay is not None:
            return hooks.replay
        with hooks.context:
            response = await self.wrapped.request(messages, model_settings, hooks.params)
        if hooks.after is not None:
            await hooks.after(response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse]:
        hooks = await self._hooks(messages, model_request_parameters)
        if hooks.replay is not None:  # answered as one piece
            yield CompletedStreamedResponse(
                hooks.replay, model_request_parameters=model_request_parameters, replay_events=True
            )
            return
        with hooks.context:
            async with self.wrapped.request_stream(
                messages, model_settings, hooks.params, run_context
            ) as stream:
                yield stream
        if hooks.after is not None:  # closed and drained: the response is final (and metered)
            await hooks.after(stream.get())


# usage ------------------------------------------------------------------------------------
_REQUESTS_SUFFIX = "_requests"


def provider_tool_requests(usage: RequestUsage) -> dict[str, int]:
    """Requests of provider-run tools in one round-trip, by tool: pydantic-ai keeps Anthropic's
    `usage.server_tool_use.web_search_requests` as the usage detail `web_search_requests`."""
    return {
        key.removesuffix(_REQUESTS_SUFFIX): count
        for key, count in (usage.details or {}).items()
        if key.endswith(_REQUESTS_SUFFIX) and count > 0
    }


def token_usage(usage: RequestUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
