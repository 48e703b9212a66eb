"""Shutting DBOS down under a running event loop without stranding a workflow.

Persyn launches DBOS from inside its event loop, so DBOS runs every async workflow on that
loop (`Runtime.start`). `DBOS.destroy` is a blocking call: made on the loop, it froze the very
workflows it then waited for (`workflow_completion_timeout_sec` only slept), and DBOS's queue
threads kept claiming work until its first line stopped them, handing each claim to the frozen
loop. Once `destroy` returned, the loop woke those tasks on a destroyed DBOS, and each logged
a 30-line traceback ("No DBOS was created yet", "System database accessed before DBOS was
launched"); `printf 'hi\\n' | persyn chat` printed one in 7 of 9 runs, after 6 to 10 s.

So `shutdown_dbos` takes DBOS down in an order that keeps the loop running while anything
still needs it:

1. stop the queue threads (DBOS's own stop events, which `destroy` sets first anyway) and wait
   off the loop until every `queue-worker-*` thread has returned: a claim in flight is handed
   to the loop, which is free to take it;
2. let the workflows running on this loop finish, for at most `grace` seconds;
3. cancel the ones still running. A cancelled workflow records nothing: it stays PENDING under
   this process's executor id, and the next process recovers it (DBOS recovers its own
   executor's work at launch, and `_executor.adopt_dead_executors` a dead slot's), resuming
   after its last checkpointed step. DBOS logs a warning for each cancelled task and step; that
   is expected here, so those records are dropped while the cancelled tasks unwind;
4. `DBOS.destroy`, with nothing left on the loop that could touch it.

The assumptions about DBOS 3.4's internals (a global instance with `background_thread_stop_events`,
queue threads named `queue-worker-<queue>`, workflows as tasks running `_execute_workflow_async`,
the cancellation warning's wording) are the ones `_wake.py` makes, plus the last two;
`tests/e2e/test_chat_exit.py` fails when any of them stops holding (a traceback or a warning
at exit). Should the instance be missing, step 1 is skipped and the rest still holds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dbos import DBOS

__all__ = ["running_workflows", "shutdown_dbos"]

log = logging.getLogger(__name__)

_QUEUE_THREAD_PREFIX = "queue-worker-"
_WORKFLOW_CORO = "_execute_workflow_async"
_CANCELLED_WARNING = "Asyncio task cancelled"
_THREAD_JOIN_SECONDS = 5.0  # a queue worker ends its claim in milliseconds; this is a bound


def running_workflows() -> list[asyncio.Task[Any]]:
    """The DBOS workflows running on this loop (each is a task running one workflow)."""
    current = asyncio.current_task()
    return [
        task
        for task in asyncio.all_tasks()
        if task is not current and getattr(task.get_coro(), "__name__", "") == _WORKFLOW_CORO
    ]


async def shutdown_dbos(grace: float) -> list[str]:
    """Stop claiming, let running workflows finish within `grace` seconds, cancel the rest
    (they resume in the next process), then destroy DBOS. Returns the names of the tasks
    cancelled (for the log)."""
    await asyncio.to_thread(_stop_claiming)
    running = running_workflows()
    if running and grace > 0:
        await asyncio.wait(running, timeout=grace)
    left = [task for task in running_workflows() if not task.done()]
    if left:
        with _quiet_cancellation():
            for task in left:
                task.cancel()
            await asyncio.wait(left, timeout=_THREAD_JOIN_SECONDS)
        log.info("%d unfinished workflow(s) resume in the next process", len(left))
    DBOS.destroy(workflow_completion_timeout_sec=0)
    return [task.get_name() for task in left]


def _stop_claiming() -> None:
    """Set DBOS's stop events (what `destroy` does first) and wait until its queue threads
    have handed over what they claimed. Runs off the loop: the hand-over needs the loop."""
    from dbos import _dbos

    instance: Any = getattr(_dbos, "_dbos_global_instance", None)
    events: list[Any] = list(getattr(instance, "background_thread_stop_events", None) or [])
    for event in events:
        event.set()
    deadline = time.monotonic() + _THREAD_JOIN_SECONDS
    for thread in threading.enumerate():
        if thread.name.startswith(_QUEUE_THREAD_PREFIX) and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


class _DropCancellationWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and record.getMessage().startswith(_CANCELLED_WARNING))


@contextmanager
def _quiet_cancellation() -> Iterator[None]:
    """DBOS warns for every cancelled workflow and step; cancelling at shutdown is the plan."""
    dbos_log = logging.getLogger("dbos")
    quiet = _DropCancellationWarnings()
    handlers = [*dbos_log.handlers, *logging.getLogger().handlers]
    dbos_log.addFilter(quiet)
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        dbos_log.removeFilter(quiet)
        for handler in handlers:
            handler.removeFilter(quiet)
