"""One trace per activation (SPEC App. D), on OpenTelemetry.

`Tracing` owns one process's `TracerProvider` (never the global one: several runtimes may
live in one test process, and DBOS must not pick it up) and hands out the spans Persyn
records, through helpers that apply the content policy in one place:

- `activation(agent_id, event_id)`: the root of a turn. Its trace id *is* the event id (a
  ULID is 128 bits, as a trace id is) and its span id is derived from it, so a workflow that
  a crash made run again in another process continues the same trace under the same root,
  and `persyn traces show EVENT_ID` needs no index;
- `background(name, parent=...)`: work a turn spawned on the background queue (deferred
  deliberation, extraction, consolidation), joined to the turn's trace through `parent`, a
  W3C `traceparent` carried in what was enqueued (`carrier()` at the enqueue);
- `model_call(stage, model)`, opened by the gateway's `TracedModel` wrapper;
- `tool_call(name, arguments)`, opened by the tool step.

Nesting is implicit: the current span lives in OpenTelemetry's context, a contextvar, so it
travels exactly as the usage attribution does (`usage/context.py`): into every task a turn
starts (the critics' `gather`), and into DBOS steps, which run in the workflow's task.

Disabled (`[tracing] enabled = false`), every helper is a no-op over the API's non-recording
span, so call sites do not branch, and the gateway adds no wrapper at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from ulid import ULID

from persyn.core.config.tracing import TracingConfig
from persyn.tracing.base import ATTR, ContentPolicy, SpanKind
from persyn.tracing.export import BoundedExport
from persyn.tracing.local import LocalSpanExporter

__all__ = ["ModelCallSpan", "ToolCallSpan", "Tracing", "TurnSpan", "trace_id_of"]

log = logging.getLogger(__name__)

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACEPARENT = "traceparent"
# The ids the next root span gets (see `_DerivedIds`); None: random ones.
_next_ids: ContextVar[tuple[int, int] | None] = ContextVar("persyn_next_trace_ids", default=None)


def trace_id_of(event_id: str) -> str:
    """The trace id (32 hex digits) of the activation of `event_id`."""
    return f"{int(ULID.from_str(event_id)):032x}"


def _root_span_id(event_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{event_id}:root".encode()).digest()[:8], "big") or 1


class _DerivedIds(IdGenerator):
    """Random ids, except for a root span opened by `Tracing.activation`: the SDK asks its id
    generator for a root's trace id and span id, so this is where they can be derived."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        pending = _next_ids.get()
        return pending[0] if pending is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        pending = _next_ids.get()
        if pending is not None:
            _next_ids.set(None)  # only the root's own span id
            return pending[1]
        return self._random.generate_span_id()


class _Content:
    """The content policy: what text a span may carry, cut to `limit` characters."""

    def __init__(self, policy: ContentPolicy, limit: int) -> None:
        self.full = policy is ContentPolicy.FULL
        self._limit = limit

    def put(self, span: Span, key: str, text: Callable[[], str | None] | str | None) -> None:
        if not self.full or not span.is_recording():
            return
        value = text() if callable(text) else text
        if value is not None:
            span.set_attribute(key, value if len(value) <= self._limit else value[: self._limit] + "…")

    def failed(self, span: Span, exc: BaseException) -> None:
        span.set_attribute(ATTR.ERROR, type(exc).__name__)
        description = f"{type(exc).__name__}: {exc}" if self.full else type(exc).__name__
        span.set_status(Status(StatusCode.ERROR, description[:500]))


class TurnSpan:
    """The root span of one activation, annotated as the turn learns who and what it serves."""

    def __init__(self, span: Span, content: _Content) -> None:
        self._span = span
        self._content = content

    @property
    def wants_input(self) -> bool:
        """True when the triggering input's text would be recorded (worth reading it)."""
        return self._content.full and self._span.is_recording()

    def setup(
        self,
        *,
        kind: str,
        surface: str,
        channel: str,
        participant: str | None,
        participant_name: str,
        conversation_id: str,
        mode: str,
    ) -> None:
        span = self._span
        span.update_name(f"activation {kind}")
        span.set_attributes(
            {
                ATTR.ACTIVATION_KIND: kind,
                ATTR.SURFACE: surface,
                ATTR.CHANNEL: channel,
                ATTR.CONVERSATION: conversation_id,
                ATTR.MODE: mode,
            }
        )
        if participant is not None:
            span.set_attribute(ATTR.PARTICIPANT, participant)
        self._content.put(span, ATTR.PARTICIPANT_NAME, participant_name)

    def input(self, text: str | None) -> None:
        self._content.put(self._span, ATTR.INPUT, text)

    def outcome(self, *, transmitted: bool, action: str | None, text: str | None, reason: str | None) -> None:
        """What was transmitted, or the fact of silence (and, with full content, why)."""
        self._span.set_attribute(ATTR.TRANSMITTED, transmitted)
        if action is not None:
            self._span.set_attribute(ATTR.ACTION, action)
        if transmitted:
            self._content.put(self._span, ATTR.OUTPUT, text)
        self._content.put(self._span, ATTR.REASON, reason)


class ModelCallSpan:
    def __init__(self, span: Span, content: _Content) -> None:
        self._span = span
        self._content = content

    def request(self, messages: Callable[[], str], tools: Sequence[Mapping[str, Any]]) -> None:
        """What the model was given: the messages (full content) and the tools it was offered
        (their names always; their definitions with full content)."""
        if tools:
            self._span.set_attribute(ATTR.TOOLS_OFFERED, [str(tool["name"]) for tool in tools])
            self._content.put(self._span, ATTR.TOOL_DEFINITIONS, lambda: json.dumps(list(tools), default=str))
        self._content.put(self._span, ATTR.INPUT, messages)

    def response(
        self,
        *,
        model: str | None,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_write_tokens: int,
        usage_id: str | None,
        output: Callable[[], str],
    ) -> None:
        span = self._span
        span.set_attributes(
            {
                ATTR.INPUT_TOKENS: input_tokens,
                ATTR.OUTPUT_TOKENS: output_tokens,
                ATTR.CACHE_READ_TOKENS: cache_read_tokens,
                ATTR.CACHE_WRITE_TOKENS: cache_write_tokens,
            }
        )
        if model:
            span.set_attribute(ATTR.ANSWERED_BY, model)
        if usage_id:
            span.set_attribute(ATTR.USAGE_ID, usage_id)
        self._content.put(span, ATTR.OUTPUT, output)

    def heard(self, *, seconds: float, usage_id: str | None, output: Callable[[], str]) -> None:
        """A transcription's answer: the seconds of audio heard and (full content) the words."""
        self._span.set_attribute(ATTR.AUDIO_SECONDS, seconds)
        if usage_id:
            self._span.set_attribute(ATTR.USAGE_ID, usage_id)
        self._content.put(self._span, ATTR.OUTPUT, output)

    def failed(self, exc: BaseException) -> None:
        self._content.failed(self._span, exc)


class ToolCallSpan:
    def __init__(self, span: Span, content: _Content) -> None:
        self._span = span
        self._content = content

    def result(self, *, status: str, ok: bool, content: str) -> None:
        self._span.set_attribute(ATTR.TOOL_STATUS, status)
        if not ok:
            self._span.set_status(Status(StatusCode.ERROR, status))
        self._content.put(self._span, ATTR.TOOL_RESULT, content)


class Tracing:
    """One process's tracer (see the module note). `start()` builds the provider and its
    exporters; `shutdown()` flushes what is buffered, bounded by the export timeout.

    `exporters` are added to the configured ones (tests pass the SDK's in-memory exporter)."""

    def __init__(
        self,
        config: TracingConfig,
        *,
        directory: Path,
        exporters: Sequence[SpanExporter] = (),
        service_name: str = "persyn",
    ) -> None:
        self.config = config
        self.directory = directory
        self._extra = tuple(exporters)
        self._service = service_name
        self._content = _Content(ContentPolicy(config.content), config.max_content_chars)
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer = trace.NoOpTracer()
        self.processors: list[BoundedExport] = []

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def start(self) -> None:
        if not self.enabled or self._provider is not None:
            return
        provider = TracerProvider(
            resource=Resource.create({"service.name": self._service}),
            id_generator=_DerivedIds(),
            shutdown_on_exit=False,
        )
        flush = self.config.otlp_timeout_seconds + 1.0
        self.processors = []
        for name, exporter in self._exporters():
            processor = BoundedExport(
                exporter,
                name=name,
                queue_size=self.config.queue_size,
                flush_seconds=flush,
                drops_dir=self.directory,
            )
            provider.add_span_processor(processor)
            self.processors.append(processor)
        self._provider = provider
        self._tracer = provider.get_tracer("persyn")

    def _exporters(self) -> list[tuple[str, SpanExporter]]:
        chosen: list[tuple[str, SpanExporter]] = []
        for name in self.config.exporters:
            if name == "local":
                chosen.append((name, LocalSpanExporter(self.directory, keep_days=self.config.keep_days)))
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                exporter = OTLPSpanExporter(
                    endpoint=self.config.otlp_endpoint, timeout=self.config.otlp_timeout_seconds
                )
                chosen.append((name, exporter))
        chosen.extend((f"extra-{n}", exporter) for n, exporter in enumerate(self._extra))
        return chosen

    def shutdown(self) -> None:
        """Flush and stop (blocking: call it off the event loop). Safe to call twice."""
        provider, self._provider = self._provider, None
        self._tracer = trace.NoOpTracer()
        if provider is not None:
            provider.shutdown()

    def force_flush(self) -> bool:
        return self._provider.force_flush() if self._provider is not None else True

    # spans ---------------------------------------------------------------------------------
    @contextmanager
    def activation(self, agent_id: str, event_id: str, thread_id: str | None = None) -> Iterator[TurnSpan]:
        """The root span of the activation of `event_id` (see the module note)."""
        token = _next_ids.set((int(ULID.from_str(event_id)), _root_span_id(event_id)))
        try:
            span = self._tracer.start_span(
                "activation",
                context=otel_context.Context(),  # a root, whatever is current
                attributes={ATTR.KIND: SpanKind.ACTIVATION.value, ATTR.AGENT: agent_id, ATTR.EVENT: event_id},
            )
        finally:
            _next_ids.reset(token)
        if thread_id:
            span.set_attribute(ATTR.THREAD, thread_id)
        with self._current(span):
            yield TurnSpan(span, self._content)

    @contextmanager
    def background(
        self,
        name: str,
        *,
        parent: str | None,
        agent_id: str,
        conversation_id: str | None = None,
        event_id: str | None = None,
    ) -> Iterator[None]:
        """A span for background work, a child of `parent` (a `carrier()` value) when given,
        else the root of a trace of its own."""
        context = _PROPAGATOR.extract({_TRACEPARENT: parent}) if parent else otel_context.Context()
        attributes: dict[str, str] = {ATTR.KIND: SpanKind.BACKGROUND.value, ATTR.AGENT: agent_id}
        if conversation_id:
            attributes[ATTR.CONVERSATION] = conversation_id
        if event_id:
            attributes[ATTR.EVENT] = event_id
        span = self._tracer.start_span(name, context=context, attributes=attributes)
        with self._current(span):
            yield

    @contextmanager
    def model_call(self, stage: str, model: str) -> Iterator[ModelCallSpan]:
        span = self._tracer.start_span(
            f"model {stage}",
            attributes={ATTR.KIND: SpanKind.MODEL.value, ATTR.STAGE: stage, ATTR.MODEL: model},
        )
        with self._current(span):
            yield ModelCallSpan(span, self._content)

    @contextmanager
    def tool_call(self, name: str, arguments: Callable[[], str]) -> Iterator[ToolCallSpan]:
        span = self._tracer.start_span(
            f"tool {name}", attributes={ATTR.KIND: SpanKind.TOOL.value, ATTR.TOOL: name}
        )
        self._content.put(span, ATTR.TOOL_ARGUMENTS, arguments)
        with self._current(span):
            yield ToolCallSpan(span, self._content)

    def carrier(self) -> str | None:
        """The current span as a W3C `traceparent`, to put in what is enqueued (None: none)."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get(_TRACEPARENT)

    @contextmanager
    def _current(self, span: Span) -> Iterator[None]:
        """Make `span` current for the block and end it after; an exception marks it failed
        (its type only, unless content is full) and propagates."""
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        except BaseException as exc:
            if span.is_recording():
                self._content.failed(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()
