"""The bounded export queue: ending a span never waits on an exporter; beyond the bound spans
are dropped and counted, and the count reaches the doctor's file; flush and shutdown are
bounded. The local span store skips a torn line."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from persyn.tracing import BoundedExport, read_losses, read_spans
from persyn.tracing.local import LocalSpanExporter


class Stuck(SpanExporter):
    """An exporter that blocks until released, as an export to a hung collector does."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.exported: list[str] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(30)
        self.exported.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def test_a_stuck_exporter_costs_spans_counted_never_a_wait(tmp_path: Path) -> None:
    stuck = Stuck()
    processor = BoundedExport(stuck, name="otlp", queue_size=2, flush_seconds=0.2, drops_dir=tmp_path)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("first").end()
    assert processor.force_flush() is False  # bounded: the export of "first" is stuck
    assert stuck.entered.wait(30)
    for name in ("second", "third", "fourth"):
        tracer.start_span(name).end()  # returns at once though the exporter is stuck
    assert (processor.counts.dropped, processor.counts.exported) == (1, 0)
    stuck.release.set()
    assert processor.force_flush() is True
    assert stuck.exported == ["first", "second", "third"]
    provider.shutdown()
    (loss,) = read_losses(tmp_path, since=datetime(2000, 1, 1, tzinfo=UTC))
    assert (loss.exporter, loss.dropped, loss.failed) == ("otlp", 1, 0)


def test_the_local_store_keeps_whole_spans_and_skips_a_torn_line(tmp_path: Path) -> None:
    processor = BoundedExport(
        LocalSpanExporter(tmp_path, keep_days=14), name="local", queue_size=64, flush_seconds=5.0
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("parent"), tracer.start_as_current_span("child"):
        pass
    provider.shutdown()
    (path,) = tmp_path.glob("spans-*.jsonl")
    with path.open("a") as handle:
        handle.write('{"trace_id": "torn')  # a write cut short by a crash
    spans = read_spans(tmp_path)
    assert [span.name for span in spans] == ["child", "parent"]
    child, parent = spans
    assert child.parent_id == parent.span_id and child.trace_id == parent.trace_id
    assert read_spans(tmp_path, since=datetime(2999, 1, 1, tzinfo=UTC)) == []
