"""The meter fans out without ever blocking or breaking the caller (SPEC App. C, §7)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from usage_fakes import make_record

from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.ledger import read_records
from persyn.usage.meter import Meter, MeterAdapter
from persyn.usage.records import UsageRecord


class Raising:
    def __init__(self) -> None:
        self.closed = False

    def handle(self, record: UsageRecord) -> None:
        raise RuntimeError("adapter broken")

    def close(self) -> None:
        self.closed = True
        raise RuntimeError("cannot even close")


class Hanging:
    """Blocks on every record until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.seen: list[str] = []

    def handle(self, record: UsageRecord) -> None:
        self.release.wait(10)
        self.seen.append(record.id)

    def close(self) -> None:
        pass


def test_adapters_satisfy_the_protocol(tmp_path: Path) -> None:
    assert isinstance(JsonlAdapter(tmp_path / "u.jsonl"), MeterAdapter)
    assert isinstance(Raising(), MeterAdapter)


def test_a_raising_and_a_hanging_adapter_do_not_affect_the_log_or_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    hanging = Hanging()
    raising = Raising()
    meter = Meter([raising, hanging, JsonlAdapter(path)])
    records = [make_record() for _ in range(20)]

    started = time.monotonic()
    for record in records:
        meter.emit(record)
    assert time.monotonic() - started < 0.5  # emit never waits for an adapter

    assert not meter.flush(timeout=0.3)  # the hanging adapter cannot catch up...
    assert [r.id for r in read_records(path) if r is not None] == [r.id for r in records]  # ...the log did
    assert meter.failures == 20

    hanging.release.set()
    assert meter.close(timeout=5)
    assert hanging.seen == [r.id for r in records]
    assert raising.closed


def test_a_full_queue_drops_instead_of_blocking() -> None:
    hanging = Hanging()
    meter = Meter([hanging], queue_size=2)
    started = time.monotonic()
    for _ in range(10):
        meter.emit(make_record())
    assert time.monotonic() - started < 0.5
    assert meter.dropped >= 7  # one in the worker's hands, two queued, the rest dropped
    hanging.release.set()
    assert meter.close(timeout=5)


def test_close_without_an_event_loop_flushes_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    meter = Meter([JsonlAdapter(path)])
    meter.emit(make_record())
    assert meter.close()
    assert meter.close()
    meter.emit(make_record())  # after close: ignored, never raises
    assert len([r for r in read_records(path) if r is not None]) == 1


async def test_emit_from_async_code_does_not_block_the_loop(tmp_path: Path) -> None:
    hanging = Hanging()
    meter = Meter([hanging, JsonlAdapter(tmp_path / "usage.jsonl")])
    started = time.monotonic()
    meter.emit(make_record())
    assert time.monotonic() - started < 0.1
    hanging.release.set()
    assert meter.close()


def test_a_meter_without_adapters_is_fine() -> None:
    meter = Meter()
    meter.emit(make_record())
    assert meter.flush()
    assert meter.close()
