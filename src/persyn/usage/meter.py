"""Usage-record fan-out to metering adapters (SPEC App. C, §7 "metering is fail-soft").

`Meter.emit` must never block, slow or break generation, and one adapter's trouble must
never reach another. So each adapter gets its own bounded queue and its own daemon worker
thread: `emit` only does `put_nowait` on each queue (a full queue drops the record for that
adapter and counts it), a raising adapter is logged and skipped, and a hanging adapter only
stalls its own thread. Threads rather than asyncio tasks, because records are also emitted
where no event loop runs (CLI tools, shutdown paths) and adapters do blocking I/O.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from persyn.usage.records import UsageRecord

__all__ = ["DEFAULT_QUEUE_SIZE", "Meter", "MeterAdapter"]

log = logging.getLogger(__name__)

DEFAULT_QUEUE_SIZE = 10_000


@runtime_checkable
class MeterAdapter(Protocol):
    """Consumes usage records. Called from the adapter's own worker thread, one record at a
    time, so implementations may block and need no locking of their own."""

    def handle(self, record: UsageRecord) -> None: ...

    def close(self) -> None: ...


class _Stop:
    """Queue sentinel: the worker closes its adapter and exits."""


_STOP = _Stop()


class _Lane:
    """One adapter, its queue and its worker thread."""

    def __init__(self, adapter: MeterAdapter, size: int) -> None:
        self.adapter = adapter
        self.name = type(adapter).__name__
        self.queue: queue.Queue[UsageRecord | _Stop] = queue.Queue(maxsize=size)
        self.dropped = 0
        self.failed = 0
        self._pending = 0
        self._idle = threading.Condition()
        self.thread = threading.Thread(target=self._run, name=f"persyn-meter-{self.name}", daemon=True)
        self.thread.start()

    def offer(self, item: UsageRecord | _Stop, wait: float = 0.0) -> bool:
        """Queue `item`; without `wait`, never block (a full queue refuses it)."""
        with self._idle:
            self._pending += 1
        try:
            if wait > 0:
                self.queue.put(item, timeout=wait)
            else:
                self.queue.put_nowait(item)
        except queue.Full:
            self._done()
            return False
        return True

    def wait_idle(self, deadline: float) -> bool:
        with self._idle:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
            return True

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            if not self._pending:
                self._idle.notify_all()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if isinstance(item, _Stop):
                    self._close_adapter()
                    return
                self._handle(item)
            finally:
                self._done()

    def _handle(self, record: UsageRecord) -> None:
        try:
            self.adapter.handle(record)
        except Exception:
            self.failed += 1
            # Fail soft: observability degrades, generation does not. Log the first few only
            # so a permanently broken adapter cannot flood the diagnostics.
            if self.failed <= 3:
                log.warning("metering adapter %s failed on record %s", self.name, record.id, exc_info=True)

    def _close_adapter(self) -> None:
        try:
            self.adapter.close()
        except Exception:
            log.warning("metering adapter %s failed to close", self.name, exc_info=True)


class Meter:
    """Fans usage records out to adapters without ever blocking or raising into the caller."""

    def __init__(
        self, adapters: Iterable[MeterAdapter] = (), *, queue_size: int = DEFAULT_QUEUE_SIZE
    ) -> None:
        self._lanes = [_Lane(adapter, queue_size) for adapter in adapters]
        self._closed = False

    @property
    def adapters(self) -> tuple[MeterAdapter, ...]:
        return tuple(lane.adapter for lane in self._lanes)

    @property
    def dropped(self) -> int:
        """Records dropped because an adapter's queue was full (summed over adapters)."""
        return sum(lane.dropped for lane in self._lanes)

    @property
    def failures(self) -> int:
        """Records an adapter raised on (summed over adapters)."""
        return sum(lane.failed for lane in self._lanes)

    def emit(self, record: UsageRecord) -> None:
        """Hand `record` to every adapter; returns at once, never raises."""
        if self._closed:
            return
        for lane in self._lanes:
            try:
                if not lane.offer(record):
                    lane.dropped += 1
                    if lane.dropped == 1 or lane.dropped % 1000 == 0:
                        log.warning(
                            "metering adapter %s is behind; %d record(s) dropped", lane.name, lane.dropped
                        )
            except Exception:  # pragma: no cover - put_nowait on a bounded queue does not raise otherwise
                log.warning("could not queue a usage record for %s", lane.name, exc_info=True)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` seconds for every queued record to be handled.

        Returns False if some adapter did not catch up in time (a hanging adapter is left
        behind, not waited on forever). Safe to call with or without a running event loop;
        from async code prefer `await asyncio.to_thread(meter.flush)`.
        """
        deadline = time.monotonic() + timeout
        return all([lane.wait_idle(deadline) for lane in self._lanes])

    def close(self, timeout: float = 5.0) -> bool:
        """Flush, then close every adapter (each in its own thread). Idempotent.

        Returns False if some adapter did not finish within `timeout`; its daemon thread is
        abandoned rather than holding up shutdown.
        """
        if self._closed:
            return True
        self._closed = True
        deadline = time.monotonic() + timeout
        finished = True
        for lane in self._lanes:
            if not lane.offer(_STOP, wait=max(0.001, deadline - time.monotonic())):
                finished = False  # its queue stayed full of records it cannot drain: abandon it
        for lane in self._lanes:
            lane.thread.join(max(0.0, deadline - time.monotonic()))
            finished = finished and not lane.thread.is_alive()
        return finished
