"""Waking DBOS's queue workers on enqueue: the event semantics, and a real runtime whose
queues poll so rarely that only the wake can explain a reply."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dbos import _dbos
from sqlalchemy import event

from persyn.core.clock import SystemClock
from persyn.runtime.durable import _wake as _dbos_wake
from persyn.runtime.durable.dispatch import BACKGROUND_QUEUE, EVENTS_QUEUE
from persyn.testing import harness_settings, run_runtime


def _wakeable(
    quiet_after: float = 60.0, quiet_poll: float = 0.0, enqueued: Callable[[str], bool] | None = None
) -> threading.Event:
    """A plain Event turned wakeable the way `install_queue_waker` turns DBOS's."""
    event = threading.Event()
    event._enqueued = enqueued  # type: ignore[attr-defined]
    event._woken = {}  # type: ignore[attr-defined]
    event._wake_cond = threading.Condition()  # type: ignore[attr-defined]
    event._last_return = {}  # type: ignore[attr-defined]
    event._quiet = [time.monotonic(), quiet_after, quiet_poll]  # type: ignore[attr-defined]
    event.__class__ = _dbos_wake._WakeableEvent  # pyright: ignore[reportPrivateUsage]
    return event


def _wait_in_thread(
    event: threading.Event, name: str, timeout: float
) -> tuple[threading.Thread, list[tuple[bool, float]]]:
    result: list[tuple[bool, float]] = []

    def run() -> None:
        started = time.monotonic()
        flag = event.wait(timeout)
        result.append((flag, time.monotonic() - started))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, result


def test_a_wake_ends_only_the_named_queue_workers_wait_and_says_not_stopped() -> None:
    event = _wakeable()
    woken, woken_result = _wait_in_thread(event, "queue-worker-events", 30)
    other, other_result = _wait_in_thread(event, "queue-worker-background", 0.5)
    time.sleep(0.05)
    waker = _dbos_wake.QueueWaker([event])  # type: ignore[list-item]
    waker.wake("events")
    woken.join(5)
    other.join(5)
    [(flag, waited)] = woken_result
    assert flag is False and waited < 5  # woken, not stopped
    [(other_flag, other_waited)] = other_result
    assert other_flag is False and other_waited >= 0.45  # slept its whole timeout


def test_a_quiet_queue_worker_polls_seldom_and_a_wake_still_ends_its_wait() -> None:
    """Idle (nothing woken or run here for `quiet_after`), an unwoken poll waits the quiet poll,
    not its own 10 ms (issue 33: idle claims were most of 3.7% of a core); so do DBOS's
    background jobs, its queue manager and its schedule poll; other threads sharing the event
    keep their timeout, and an enqueue here still wakes the worker at once."""
    event = _wakeable(quiet_after=0.0, quiet_poll=600.0)
    time.sleep(0.01)
    quiet, quiet_result = _wait_in_thread(event, "queue-worker-events", 0.01)
    pollers = [
        _wait_in_thread(event, name, 0.01)
        for name in ("dbos-background-jobs", "Thread-4 (queue_thread)", "Thread-5 (dynamic_scheduler_loop)")
    ]
    other, other_result = _wait_in_thread(event, "Thread-7 (poller)", 0.01)
    other.join(30)
    assert other_result and other_result[0][0] is False  # its own 10 ms
    quiet.join(0.5)
    assert quiet.is_alive() and not quiet_result  # still waiting, long past 10 ms
    assert all(thread.is_alive() and not result for thread, result in pollers)
    _dbos_wake.QueueWaker([event]).wake("events")  # type: ignore[list-item]
    quiet.join(30)
    assert quiet_result and quiet_result[0][0] is False  # woken, not stopped
    event.set()  # a stop still ends the stretched polls at once
    for thread, result in pollers:
        thread.join(30)
        assert result and result[0][0] is True


def test_a_wake_while_busy_is_kept_and_set_still_stops_everyone() -> None:
    event = _wakeable()
    _dbos_wake.QueueWaker([event]).wake("events")  # type: ignore[list-item]
    # Nobody was waiting: the next wait of that worker returns at once.
    first, first_result = _wait_in_thread(event, "queue-worker-events", 30)
    first.join(5)
    assert first_result and first_result[0][0] is False
    stopping, stop_result = _wait_in_thread(event, "queue-worker-events", 30)
    manager, manager_result = _wait_in_thread(event, "Thread-queue-manager", 30)
    time.sleep(0.05)
    event.set()
    stopping.join(5)
    manager.join(5)
    assert stop_result[0][0] is True
    assert manager_result[0][0] is True


def test_a_thread_already_in_the_original_wait_is_never_told_to_stop_by_a_wake() -> None:
    """The swap happens while DBOS's threads wait; a wake must not look like `set` to them."""
    event = threading.Event()
    old, old_result = _wait_in_thread(event, "queue-worker-events", 0.5)
    time.sleep(0.05)
    event._woken = {}  # type: ignore[attr-defined]
    event._wake_cond = threading.Condition()  # type: ignore[attr-defined]
    event._last_return = {}  # type: ignore[attr-defined]
    event._quiet = [time.monotonic(), 60.0, 0.0]  # type: ignore[attr-defined]
    event.__class__ = _dbos_wake._WakeableEvent  # pyright: ignore[reportPrivateUsage]
    _dbos_wake.QueueWaker([event]).wake("events")  # type: ignore[list-item]
    old.join(5)
    [(flag, waited)] = old_result
    assert flag is False and waited >= 0.45


async def test_in_process_events_are_answered_although_the_queue_polls_every_ten_seconds(
    tmp_path: Path,
) -> None:
    """With a 10 s polling interval, replies within 5 s comes from the wake on enqueue;
    the second event of the same agent (held back by the per-agent lock) from the wake when
    the first activation ends."""
    config = "[dispatch]\nqueue_polling_seconds = 10\n"
    async with run_runtime(tmp_path / "home", config=config, clock=SystemClock()) as pilot:
        # DBOS starts a queue's worker thread up to a second after registration, and that
        # thread first sleeps its interval before it ever looks: only a wake gets it going.
        await asyncio.sleep(1.5)
        ids = [await pilot.runtime.submit(pilot.event(text)) for text in ("first", "second")]
        markers = [await pilot.runtime.wait_marker(pilot.agent.id, event_id, timeout=5) for event_id in ids]
        assert [m.transmitted for m in markers] == [True, True]
        assert markers[0].text == "You said: first"


def test_an_unwoken_poll_claims_only_when_its_queue_has_something_enqueued() -> None:
    """Issue 33 item 15: a claim costs DBOS a transaction of several statements, the look one
    read; while nothing is enqueued the worker keeps waiting (looking once an interval), the
    first look that finds work ends the wait, a look that fails lets the claim run, a wake
    needs no look, and other threads sharing the event never look."""
    looks: list[str] = []
    found = threading.Event()

    def enqueued(queue: str) -> bool:
        looks.append(queue)
        return found.is_set()

    event = _wakeable(enqueued=enqueued)
    waiting, result = _wait_in_thread(event, "queue-worker-events", 0.01)
    waiting.join(0.5)
    assert waiting.is_alive() and not result  # nothing enqueued: still waiting, looking
    assert len(looks) >= 3 and set(looks) == {"events"}
    found.set()
    waiting.join(30)
    assert result and result[0][0] is False  # found work: the poll claims

    found.clear()
    looks.clear()
    woken, woken_result = _wait_in_thread(event, "queue-worker-events", 30)
    time.sleep(0.05)
    _dbos_wake.QueueWaker([event]).wake("events")  # type: ignore[list-item]
    woken.join(30)
    assert woken_result and woken_result[0][0] is False and looks == []  # woken: no look

    manager, manager_result = _wait_in_thread(event, "Thread-4 (queue_thread)", 0.01)
    manager.join(30)
    assert manager_result and looks == []  # not a queue worker: its own timeout, no look

    def failing(queue: str) -> bool:
        raise OSError("disk I/O error")

    broken = _wakeable(enqueued=failing)
    polling, polling_result = _wait_in_thread(broken, "queue-worker-events", 0.01)
    polling.join(30)
    assert polling_result and polling_result[0][0] is False  # the claim meets the failure


async def test_work_another_process_enqueued_is_looked_at_claimed_and_answered(tmp_path: Path) -> None:
    """The look on a real system database: an event a process without workers queued (no
    wake reaches this one) is found by the worker's polls, claimed and answered; afterwards
    the look finds neither queue holding anything."""
    settings = harness_settings(
        tmp_path / "home", config="[dispatch]\nqueue_polling_seconds = 0.5\nquiet_polling_seconds = 0\n"
    )
    async with run_runtime(settings, clock=SystemClock(), workers=False) as sender:
        event_id = await sender.runtime.submit(sender.event("from another process"))
    async with run_runtime(settings, clock=SystemClock()) as pilot:
        marker = await pilot.runtime.wait_marker(pilot.agent.id, event_id, timeout=60)
        assert marker.transmitted and marker.text == "You said: from another process"
        enqueued = _dbos_wake._enqueued_probe(_dbos._dbos_global_instance)  # pyright: ignore[reportPrivateUsage]
        assert enqueued is not None
        await pilot.settle()
        assert not enqueued(EVENTS_QUEUE) and not enqueued(BACKGROUND_QUEUE)
        # One indexed read, however many finished workflows the system database keeps: the
        # statement the look sends, as the driver received it, explained.
        engine = _dbos._dbos_global_instance._sys_db.engine  # pyright: ignore[reportPrivateUsage, reportOptionalMemberAccess]
        sent: list[tuple[str, Any]] = []

        def record(*args: Any) -> None:
            sent.append((args[2], args[3]))  # statement, parameters

        event.listen(engine, "before_cursor_execute", record)
        try:
            assert not enqueued(EVENTS_QUEUE)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        [(sql, parameters)] = sent
        with engine.connect() as connection:
            plan = " ".join(
                str(row[-1]) for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", parameters)
            )
        assert "USING COVERING INDEX" in plan and "SCAN" not in plan, plan
