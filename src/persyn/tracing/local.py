"""The local span store: JSONL files under `data/traces/`, so `persyn traces` works with no
collector (SPEC App. D: the collector is local, and optional).

One file per UTC day (`spans-YYYY-MM-DD.jsonl`, by the span's end), appended under an
exclusive lock because every process of a deployment (the daemon, `persyn chat`, a worker)
writes its own spans there. A day's file is deleted once older than `[tracing] keep_days`.
Files, not a store table: spans are written from the exporter thread, and the store's single
writer is the turn's critical path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode
from pydantic import ValidationError

from persyn.tracing.base import ATTR, SpanKind, SpanRecord, TraceSummary
from persyn.tracing.export import append_lines

__all__ = ["LocalSpanExporter", "read_spans", "span_record", "summarize", "trace_spans"]

log = logging.getLogger(__name__)

_PREFIX = "spans-"


class LocalSpanExporter(SpanExporter):
    def __init__(self, directory: Path, *, keep_days: int) -> None:
        self._directory = directory
        self._keep = timedelta(days=keep_days)
        self._purged: date | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        by_day: dict[date, list[str]] = {}
        for span in spans:
            record = span_record(span)
            by_day.setdefault(record.end.date(), []).append(record.model_dump_json())
        try:
            for day, lines in by_day.items():
                append_lines(self._directory / f"{_PREFIX}{day.isoformat()}.jsonl", lines)
            self._purge()
        except OSError:
            log.warning("could not write spans under %s", self._directory, exc_info=True)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def _purge(self) -> None:
        today = datetime.now(UTC).date()
        if self._purged == today:
            return
        self._purged = today
        for path, day in _files(self._directory):
            if day < today - self._keep:
                path.unlink(missing_ok=True)


def span_record(span: ReadableSpan) -> SpanRecord:
    context = span.get_span_context()
    if context is None:  # pragma: no cover - a finished SDK span always has one
        raise ValueError(f"span {span.name!r} has no context")
    parent = span.parent
    status = {StatusCode.OK: "ok", StatusCode.ERROR: "error"}.get(span.status.status_code, "unset")
    return SpanRecord(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=f"{parent.span_id:016x}" if parent is not None else None,
        name=span.name,
        start=_time(span.start_time),
        end=_time(span.end_time or span.start_time),
        status=status,
        attributes={key: _plain(value) for key, value in (span.attributes or {}).items()},
    )


def _time(nanoseconds: int | None) -> datetime:
    return datetime.fromtimestamp((nanoseconds or 0) / 1e9, UTC)


def _plain(value: object) -> str | bool | int | float | list[str] | list[int] | list[float] | list[bool]:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Iterable):
        return [str(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return str(value)


def _files(directory: Path) -> list[tuple[Path, date]]:
    found: list[tuple[Path, date]] = []
    if not directory.is_dir():
        return found
    for path in directory.glob(f"{_PREFIX}*.jsonl"):
        try:
            found.append((path, date.fromisoformat(path.stem.removeprefix(_PREFIX))))
        except ValueError:
            continue
    return sorted(found, key=lambda item: item[1])


def read_spans(directory: Path, *, since: datetime | None = None) -> list[SpanRecord]:
    """Every stored span that ended at or after `since` (all of them without it). A line that
    does not parse (a write torn by a crash) is skipped."""
    spans: list[SpanRecord] = []
    for path, day in _files(directory):
        if since is not None and day < since.astimezone(UTC).date():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                record = SpanRecord.model_validate_json(line)
            except (ValidationError, json.JSONDecodeError):
                continue
            if since is None or record.end >= since:
                spans.append(record)
    return spans


def trace_spans(spans: Iterable[SpanRecord], trace_id: str) -> list[SpanRecord]:
    """One trace's spans in start order (a span exported twice by a replay is kept once)."""
    unique = {span.span_id: span for span in spans if span.trace_id == trace_id}
    return sorted(unique.values(), key=lambda span: (span.start, span.end))


def summarize(spans: Iterable[SpanRecord]) -> list[TraceSummary]:
    """One summary per trace, oldest first. The root is the span without a parent in the
    trace (a background trace whose turn is not stored shows its first span)."""
    traces: dict[str, list[SpanRecord]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    summaries: list[TraceSummary] = []
    for trace_id, members in traces.items():
        members = trace_spans(members, trace_id)
        ids = {span.span_id for span in members}
        roots = [span for span in members if span.parent_id is None or span.parent_id not in ids]
        root = next((span for span in roots if span.kind == SpanKind.ACTIVATION), roots[0])
        models = [span for span in members if span.kind == SpanKind.MODEL]
        summaries.append(
            TraceSummary(
                trace_id=trace_id,
                event_id=root.text_attribute(ATTR.EVENT),
                name=root.name,
                kind=root.text_attribute(ATTR.ACTIVATION_KIND) or root.kind,
                agent_id=root.text_attribute(ATTR.AGENT),
                surface=root.text_attribute(ATTR.SURFACE),
                participant=root.text_attribute(ATTR.PARTICIPANT),
                start=min(span.start for span in members),
                duration_ms=(
                    max(span.end for span in members) - min(span.start for span in members)
                ).total_seconds()
                * 1000,
                spans=len(members),
                model_calls=len(models),
                tool_calls=sum(1 for span in members if span.kind == SpanKind.TOOL),
                input_tokens=sum(span.int_attribute(ATTR.INPUT_TOKENS) for span in models),
                output_tokens=sum(span.int_attribute(ATTR.OUTPUT_TOKENS) for span in models),
                outcome=root.text_attribute(ATTR.ACTION),
            )
        )
    return sorted(summaries, key=lambda summary: summary.start)
