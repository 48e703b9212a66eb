"""Getting finished spans out without ever holding up a turn (SPEC App. D, §7 fail-soft).

`BoundedExport` is the span processor each exporter sits behind: ending a span only appends
it to a bounded queue (under a lock, no I/O), and one daemon thread per exporter exports
batches. A full queue drops the new span and counts it; an export that fails or raises
counts its spans as failed. So a collector that hangs costs its own thread's time and, once
the queue is full, spans — never a turn. One processor per exporter, so a hung collector
never starves the local store.

The SDK's `BatchSpanProcessor` also drops on a full queue, but it does not count what it
drops, and `persyn doctor` must be able to say that spans were lost. Counts are appended to
`drops.jsonl` beside the local span files (one line per change, as deltas), because the
doctor runs in another process than the daemon that dropped them.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["DROPS_FILE", "BoundedExport", "ExportCounts", "LossReport", "read_losses"]

log = logging.getLogger(__name__)

DROPS_FILE = "drops.jsonl"
_BATCH = 256
_DELAY_SECONDS = 0.5


@dataclass
class ExportCounts:
    exported: int = 0
    dropped: int = 0  # the queue was full (or the processor shut down)
    failed: int = 0  # the exporter refused or raised


class BoundedExport(SpanProcessor):
    """A bounded queue and one export thread in front of `exporter` (see the module note).

    `flush_seconds` bounds `force_flush` and `shutdown`: buffered spans are flushed on
    shutdown, but a hung collector cannot make a process hang on its way out."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        name: str,
        queue_size: int,
        flush_seconds: float,
        drops_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.counts = ExportCounts()
        self._exporter = exporter
        self._size = queue_size
        self._flush_seconds = flush_seconds
        self._drops_dir = drops_dir
        self._queue: deque[ReadableSpan] = deque()
        self._cond = threading.Condition()
        self._accepted = 0  # spans queued so far
        self._done = 0  # spans exported, failed or abandoned so far
        self._flushing = False
        self._stopping = False
        self._reported = ExportCounts()
        self._thread = threading.Thread(target=self._run, name=f"persyn-trace-{name}", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        with self._cond:
            if self._stopping or len(self._queue) >= self._size:
                self.counts.dropped += 1
                return
            self._queue.append(span)
            self._accepted += 1
            if len(self._queue) >= _BATCH:
                self._cond.notify_all()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        deadline = time.monotonic() + min(timeout_millis / 1000, self._flush_seconds)
        with self._cond:
            target = self._accepted
            self._flushing = True
            self._cond.notify_all()
            while self._done < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            self._flushing = False
            return self._done >= target

    def shutdown(self) -> None:
        self.force_flush()
        with self._cond:
            self._stopping = True
            abandoned = len(self._queue)
            self._queue.clear()
            self.counts.dropped += abandoned
            self._cond.notify_all()
        self._thread.join(timeout=0.5)
        try:
            self._exporter.shutdown()
        except Exception:
            log.warning("shutting down the %s span exporter failed", self.name, exc_info=True)
        self._report()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._stopping:
                    self._cond.wait(_DELAY_SECONDS)
                if self._stopping:
                    return
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            if batch:
                self._export(batch)
            self._report()

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        try:
            result = self._exporter.export(batch)
        except Exception:
            log.warning("the %s span exporter raised", self.name, exc_info=True)
            result = SpanExportResult.FAILURE
        with self._cond:
            if result is SpanExportResult.SUCCESS:
                self.counts.exported += len(batch)
            else:
                self.counts.failed += len(batch)
            self._done += len(batch)
            self._cond.notify_all()

    def _report(self) -> None:
        """Append what was lost since the last report to the drops file, for the doctor."""
        with self._cond:
            dropped = self.counts.dropped - self._reported.dropped
            failed = self.counts.failed - self._reported.failed
            self._reported = ExportCounts(self.counts.exported, self.counts.dropped, self.counts.failed)
        if (dropped or failed) and self._drops_dir is not None:
            line = {
                "at": datetime.now(UTC).isoformat(),
                "pid": os.getpid(),
                "exporter": self.name,
                "dropped": dropped,
                "failed": failed,
            }
            try:
                append_lines(self._drops_dir / DROPS_FILE, [json.dumps(line)])
            except OSError:
                log.warning("could not record %d lost spans in %s", dropped + failed, self._drops_dir)


def append_lines(path: Path, lines: Sequence[str]) -> None:
    """Append whole lines under an exclusive lock: several processes share one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class LossReport:
    exporter: str
    dropped: int
    failed: int


def read_losses(directory: Path, *, since: datetime) -> list[LossReport]:
    """Spans lost per exporter since `since`, summed over every process's reports."""
    path = directory / DROPS_FILE
    totals: dict[str, tuple[int, int]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            at = datetime.fromisoformat(entry["at"])
            if at < since:
                continue
            name = str(entry["exporter"])
            dropped, failed = totals.get(name, (0, 0))
            totals[name] = (dropped + int(entry["dropped"]), failed + int(entry["failed"]))
        except (ValueError, KeyError, TypeError):
            continue  # a torn or foreign line says nothing about the others
    return [LossReport(name, dropped, failed) for name, (dropped, failed) in sorted(totals.items())]
