"""Waking DBOS's queue workers when this process enqueues (ARCHITECTURE §3).

A DBOS queue worker thread finds new work only by polling: it sleeps its polling interval
on a `threading.Event` (the stop event DBOS shares between its queue threads), then claims
what it can. A short interval makes a chat reply start sooner but costs a claim query
(about 1.5 ms of CPU) every time, idle or not, and that CPU competes with every activation
for the GIL; a long one adds up to the whole interval to every reply. DBOS 3.4 has no
public way to say "there is work now".

So this module makes the stop event wakeable. After launch it turns DBOS's stop events
into `_WakeableEvent`s (a subclass of `threading.Event` with the same layout, so the swap is
safe while threads wait on it): `wait` still returns at once when DBOS sets
the event to stop, and also when `wake(queue)` is called for the calling thread's queue
(DBOS names each queue's thread `queue-worker-<queue name>`). A wake that arrives while the
worker is busy claiming is kept, so the next wait returns at once: no wakeup is lost. Woken
polls of one queue keep a gap: 5 ms while nothing of it runs here, 40 ms while something
does, so a lone message starts at once and a burst is claimed in batches.
Enqueues in this process wake the queue at once; the polling interval remains for work
enqueued by other processes (`persyn send`, a front without workers, other workers) and can be
long. After `quiet_after` seconds with no wake and no activation started or ended here
(`QueueWaker.touch`), a queue worker's unwoken wait stretches to `quiet_poll` seconds
(`[dispatch] quiet_polling_seconds`): an idle deployment then claims a few times a minute
instead of several times a second (3.7% of a core idle, most of it these claims), and the
first event another process enqueues after a quiet spell waits up to that long. The other
DBOS threads that poll every second stretch the same way while quiet: the queue manager (it
looks for queues registered since, and restarts a dead worker), the background jobs (they
start delayed workflows and cancel timed-out ones, neither of which Persyn uses) and, for its
first minute, the schedule poll (for schedules registered since: Persyn's is applied at
start); together they were 0.6% of a core idle.

An unwoken poll of a queue worker asks first, with one indexed read of the system database,
whether anything of its queue is enqueued at all; when nothing is, the worker waits another
interval instead of claiming. DBOS's claim is a transaction of several statements built anew
each time (about 5-9 ms of CPU on a partitioned queue, bench/turn.py's profile), the look a
single-row read: while turns run, both queues were claimed four and two times a second for
nothing (most of the CPU a 300 ms-model turn spent beyond a 0 ms one). A look that finds a row,
or fails, lets the claim run as before, so nothing enqueued is ever left for longer than an
interval; a wake claims at once without looking.

If DBOS's internals ever differ from what this expects (no global instance, no stop events),
`install` returns None and dispatch simply polls its queues: slower, never wrong. The wake
is a latency hint only; correctness (claims, the per-agent partition lock) stays DBOS's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["QueueWaker", "install_queue_waker"]

log = logging.getLogger(__name__)

_THREAD_PREFIX = "queue-worker-"
# The other DBOS threads whose polls stretch while quiet (module docstring): the background
# jobs by name, the queue manager and the schedule poll by their targets (they run unnamed, as
# `Thread-N (queue_thread)`).
_QUIET_THREADS = (_THREAD_PREFIX, "dbos-background-jobs")
_QUIET_TARGETS = ("(queue_thread)", "(dynamic_scheduler_loop)")
# The least time between two polls of one queue worker when woken (a poll that claims costs
# a few ms of CPU): short while the queue has nothing running here (a chat message starts at
# once), longer while it does (a burst is claimed in batches, not one claim per enqueue).
IDLE_GAP_SECONDS = 0.005
BUSY_GAP_SECONDS = 0.04
# How long without a wake or an activation here before unwoken polls stretch to the quiet poll.
QUIET_AFTER_SECONDS = 10.0


class _WakeableEvent(threading.Event):
    """`threading.Event` whose `wait` also ends when the waiting thread is woken by name.

    Wakes go through a condition of its own: a thread that was already inside the original
    `Event.wait` when the class was swapped waits on the event's own condition, where a
    notify would read as "stop" (its wait returns True) — so only `set` notifies that one."""

    _woken: dict[str, float]  # thread name -> least gap since its last poll
    _wake_cond: threading.Condition
    _last_return: dict[str, float]
    _quiet: list[float]  # [last activity (monotonic), quiet after (s), quiet poll (s)]
    # Whether a queue (by name) has anything enqueued; None: unwoken polls always claim.
    _enqueued: Callable[[str], bool] | None = None

    def set(self) -> None:
        super().set()
        with self._wake_cond:
            self._wake_cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        name = threading.current_thread().name
        enqueued = self._enqueued if name.startswith(_THREAD_PREFIX) else None
        while True:
            woken = self._wait_once(name, timeout)
            if woken or enqueued is None or self.is_set():
                break
            # An unwoken poll: claim only if the queue has something enqueued (module docstring).
            try:
                if enqueued(name.removeprefix(_THREAD_PREFIX)):
                    break
            except Exception:  # the claim will meet (and report) whatever failed here
                break
        with self._wake_cond:
            self._woken.pop(name, None)
            self._last_return[name] = time.monotonic()
        return self.is_set()

    def _wait_once(self, name: str, timeout: float | None) -> bool:
        """Until stopped, woken (True) or `timeout` (stretched while quiet) has passed."""
        with self._wake_cond:
            active_at, quiet_after, quiet_poll = self._quiet
            quiet = time.monotonic() - active_at > quiet_after
            if (
                timeout is not None
                and quiet
                and (name.startswith(_QUIET_THREADS) or name.endswith(_QUIET_TARGETS))
            ):
                timeout = max(timeout, quiet_poll)
            deadline = None if timeout is None else time.monotonic() + timeout
            # `set` sets the flag before taking this condition's lock to notify: no stop is missed.
            while not self.is_set():
                now = time.monotonic()
                gap = self._woken.get(name)
                if gap is not None:
                    # Woken polls keep a minimum gap (see the constants).
                    earliest = self._last_return.get(name, 0.0) + gap
                    if now >= earliest:
                        return True
                    wake_at = earliest if deadline is None else min(deadline, earliest)
                else:
                    wake_at = deadline
                remaining = None if wake_at is None else wake_at - now
                if remaining is not None and remaining <= 0:
                    return False
                self._wake_cond.wait(remaining)
            return False

    def wake_thread(self, name: str, gap: float) -> None:
        with self._wake_cond:
            self._quiet[0] = time.monotonic()
            self._woken[name] = min(gap, self._woken.get(name, gap))  # the sooner wake wins
            self._wake_cond.notify_all()

    def touch(self) -> None:
        """Work ran here: polls keep their own interval for the next `quiet_after` seconds."""
        with self._wake_cond:
            self._quiet[0] = time.monotonic()


class QueueWaker:
    """Wakes this process's DBOS worker thread for a queue (see the module docstring)."""

    def __init__(self, events: list[_WakeableEvent]) -> None:
        self._events = events

    def touch(self) -> None:
        """An activation started or ended here (claimed from any process's enqueue)."""
        for event in self._events:
            event.touch()

    def wake(self, queue_name: str, *, busy: bool = False) -> None:
        """`busy`: the queue has work running in this process (then polls batch)."""
        name = _THREAD_PREFIX + queue_name
        gap = BUSY_GAP_SECONDS if busy else IDLE_GAP_SECONDS
        for event in self._events:
            event.wake_thread(name, gap)


def install_queue_waker(
    quiet_poll: float = 0.0, quiet_after: float = QUIET_AFTER_SECONDS
) -> QueueWaker | None:
    """Make the launched DBOS instance's stop events wakeable; None if it cannot be done
    (then the queues are polled only). `quiet_poll`: the least wait of an unwoken poll once
    nothing happened here for `quiet_after` seconds (0: polls keep their interval)."""
    try:
        from dbos import _dbos

        instance: Any = getattr(_dbos, "_dbos_global_instance", None)
        stop_events: list[Any] = list(getattr(instance, "background_thread_stop_events", None) or [])
        jobs_event = getattr(instance, "_background_jobs_stop_event", None)
        if jobs_event is not None:
            stop_events.append(jobs_event)
        enqueued = _enqueued_probe(instance)
        wakeable: list[_WakeableEvent] = []
        for event in stop_events:
            if type(event) is threading.Event:
                # State first, class last: a thread calling `wait` sees a complete object.
                event._enqueued = enqueued  # pyright: ignore[reportAttributeAccessIssue]
                event._woken = {}  # pyright: ignore[reportAttributeAccessIssue]
                event._wake_cond = threading.Condition()  # pyright: ignore[reportAttributeAccessIssue]
                event._last_return = {}  # pyright: ignore[reportAttributeAccessIssue]
                event._quiet = [time.monotonic(), quiet_after, quiet_poll]  # pyright: ignore[reportAttributeAccessIssue]
                event.__class__ = _WakeableEvent
            if isinstance(event, _WakeableEvent):
                wakeable.append(event)
    except Exception as exc:  # a latency hint only: polling still finds the work
        log.info("DBOS queues are polled only (no wake on enqueue): %s", exc)
        return None
    if not wakeable:
        log.info("DBOS queues are polled only (no wake on enqueue): no queue stop event found")
        return None
    return QueueWaker(wakeable)


def _enqueued_probe(instance: Any) -> Callable[[str], bool] | None:
    """Whether a queue has a workflow enqueued (any process, any application: a row it cannot
    claim only costs the claim that finds so), read from DBOS's system database through its
    engine and its `workflow_status` table (the in-flight index covers the read). None if the
    system database is not what this expects: unwoken polls then always claim."""
    import sqlalchemy as sa

    system = getattr(instance, "_sys_db", None)
    engine = getattr(system, "engine", None)
    status = getattr(getattr(system, "tables", None), "workflow_status", None)
    if not isinstance(engine, sa.Engine) or not isinstance(status, sa.Table):
        log.info("DBOS queues are claimed at every poll: no system database to look at first")
        return None
    statement = enqueued_statement(status)

    def enqueued(queue: str) -> bool:
        with engine.connect() as connection:
            return connection.execute(statement, {"queue": queue}).first() is not None

    return enqueued


def enqueued_statement(status: Any) -> Any:
    """The look's read of DBOS's `workflow_status` table (`queue` bound). The in-flight states
    are written out as literals: SQLite uses a partial index (`… WHERE status IN ('ENQUEUED',
    'PENDING')`, DBOS's in-flight index) only for a query that repeats its condition, and
    without it the look would scan every workflow the system database keeps."""
    import sqlalchemy as sa

    in_flight = [sa.literal_column("'ENQUEUED'"), sa.literal_column("'PENDING'")]
    return (
        sa.select(sa.literal(1))
        .where(
            status.c.queue_name == sa.bindparam("queue"),
            status.c.status.in_(in_flight),
            status.c.status == "ENQUEUED",
        )
        .limit(1)
    )
