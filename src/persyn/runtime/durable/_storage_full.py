"""An activation the storage refused (a full disk) ends, recorded, instead of staying pending.

DBOS records a workflow's outcome in its system database. When the disk is full, the step that
failed could not checkpoint its error and that write fails too: the workflow stayed PENDING
with no task running it. Its agent's queue partition stayed taken (`partition_concurrency=1` is
the per-agent lock), so every later message waited out its timeout (504 after 300 s, even once
`persyn sandbox reset` had made room), and the next process to start resumed it, re-running the
step whose output was never checkpointed: a `run_code` that had filled the disk filled it again.

So an activation that fails on a full disk (`core.errors.is_storage_full`, whatever layer
raised it) is ended here:

1. at once, without writing anything: a waiter in this process gets an unanswered completion
   marker and the surface a notice (`Transmitter.tell_unanswered`);
2. the failure is recorded — the event's completion marker (unless a reply had already been
   sent) and its deliberation trace (`Transmitter.record_unanswered`), then the workflow's
   `FAILED_EVENT` in DBOS's own database, where its outcome goes next — each retried every
   `_FIRST_RETRY` seconds, doubling to `_LAST_RETRY`, until it is taken: there is room again.
   Other errors are not retried: they end the workflow as any failure does;
3. the activation returns that outcome, which DBOS records as the workflow's result: terminal.
   The partition is free (the agent answers the next message) and no restart replays it.

A background workflow (deliberation, extraction, a reminder tick, close hooks, an image) is
guarded the same way by `ends_on_full_storage`: it ends with a `StoreError` once DBOS can
record it, so it neither holds a worker slot of its queue nor runs again after a restart.

The workflow waits in step 2 instead of ending at once because nothing it ended with could be
recorded while the disk is full. A process stopped while it still waits leaves the workflow
PENDING, as a `kill -9` does; the next process resumes it, and meets the full disk (and waits
again) or finds room. The log gets one line when the turn stops and one when it ends.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar

from dbos import DBOS

from persyn.core.errors import StoreError, is_storage_full
from persyn.runtime.turn.models import TransmitResult

__all__ = [
    "FAILED_EVENT",
    "STORAGE_FULL_REASON",
    "UnansweredRecorder",
    "end_on_full_storage",
    "ends_on_full_storage",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

log = logging.getLogger(__name__)

STORAGE_FULL_REASON = "not answered: the agent's storage was full"
FAILED_EVENT = "persyn.failed"  # the DBOS event a workflow that ended on a full disk sets
_FIRST_RETRY = 1.0  # seconds before recording the failure is tried again
_LAST_RETRY = 30.0  # the longest wait between tries


class UnansweredRecorder(Protocol):
    """What ends an unanswered turn (`transmit.Transmitter`)."""

    async def tell_unanswered(self, agent_id: str, event_id: str, reason: str) -> None: ...

    async def record_unanswered(
        self, agent_id: str, event_id: str, reason: str, detail: str
    ) -> TransmitResult: ...


async def end_on_full_storage(
    recorder: UnansweredRecorder, agent_id: str, event_id: str, error: BaseException
) -> TransmitResult:
    """End the activation of `event_id`, which failed with `error` on a full disk: once the
    failure is recorded (module docstring)."""
    detail = f"storage full: {_first_line(error)}"
    log.warning(
        "the turn for event %s of agent %s stopped: the storage is full (%s); it ends unanswered "
        "once there is room again",
        event_id,
        agent_id,
        _first_line(error),
    )
    await recorder.tell_unanswered(agent_id, event_id, STORAGE_FULL_REASON)
    result = await _when_there_is_room(
        lambda: recorder.record_unanswered(agent_id, event_id, STORAGE_FULL_REASON, detail)
    )
    await _when_there_is_room(lambda: DBOS.set_event_async(FAILED_EVENT, detail))
    log.warning(
        "the turn for event %s of agent %s ended unanswered: the storage was full", event_id, agent_id
    )
    return result


def ends_on_full_storage(
    workflow: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """For a background workflow (under its `DBOS.workflow`): one that fails on a full disk
    ends with that error once DBOS can record it (its `FAILED_EVENT` is written first, and
    retried until there is room), instead of staying PENDING, holding a worker slot of its
    queue and being run again by the next process."""

    @functools.wraps(workflow)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await workflow(*args, **kwargs)
        except Exception as exc:
            if not is_storage_full(exc):
                raise
            detail = f"storage full: {_first_line(exc)}"
            log.warning(
                "workflow %s (%s) stopped: the storage is full; it ends with that error once there is "
                "room again",
                DBOS.workflow_id,
                workflow.__name__,
            )
            await _when_there_is_room(lambda: DBOS.set_event_async(FAILED_EVENT, detail))
            raise StoreError(detail) from exc

    return guarded


async def _when_there_is_room(record: Callable[[], Awaitable[T]]) -> T:
    """`record()`, tried again while it fails on a full disk (other errors are raised)."""
    delay = _FIRST_RETRY
    while True:
        try:
            return await record()
        except Exception as exc:
            if not is_storage_full(exc):
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, _LAST_RETRY)


def _first_line(error: BaseException) -> str:
    """The error's own words, without the statement and parameters a database error appends."""
    cause: BaseException = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    text = str(cause) or type(cause).__name__
    return text.splitlines()[0] if text.strip() else type(cause).__name__
