"""Dispatch (ARCHITECTURE §3): enqueueing durable work, and waiting for a turn's outcome.

A `Dispatcher` enqueues workflows exactly once under a given id. Two adapters:
- `WorkerDispatcher`, in a process that runs DBOS workers (`persyn run`, `persyn chat`,
  `persyn worker`): enqueues through the queues it registered, and wakes their worker at once
  (`_wake.py`) instead of leaving the work to the next poll;
- `ClientDispatcher`, in a process that only submits (`persyn send`) and inside a durable step
  (a step may not start workflows itself; the event id keeps it exactly-once either way):
  enqueues by workflow name through a `DBOSClient` on the system database, for the workers.

`Submitter` is all a process that only submits opens: the store, an `Intake` over a client
dispatcher and the `Markers`. It builds no runtime, so `persyn send` imports no model gateway,
cognition or embedder: it enqueues the activation by its DBOS name (`ACTIVATION_WORKFLOW`).

Every derived workflow id is derived here, once: a replayed workflow that enqueues again asks
for the same id and DBOS attaches to the first.

`Markers` is the other half of submitting: the completion marker of an event (SPEC App. B),
handed over in-process when this process transmitted it, polled from the store otherwise. A
process that only submits says so at once when no worker is alive to answer
(`NoWorkerRunning`: no executor slot is held, `_executor.live_executors`) instead of waiting
out its timeout; the event stays queued for the next worker either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from dbos import DBOS, DBOSClient, EnqueueOptions, Queue, SetEnqueueOptions, SetWorkflowID
from sqlalchemy import Engine

from persyn.core.clock import Clock
from persyn.core.config import Settings
from persyn.core.errors import InputError
from persyn.core.events import CompletionMarker, Event
from persyn.core.ids import derived_id, id_time, parse_id
from persyn.core.messages import validate_message_text
from persyn.runtime.durable._executor import executor_directory, live_executors
from persyn.runtime.durable._system_sqlite import dbos_sqlite_engine
from persyn.runtime.durable._wake import QueueWaker
from persyn.runtime.durable.steps import APPLICATION_VERSION
from persyn.store import Store, open_store

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

__all__ = [
    "ACTIVATION_WORKFLOW",
    "BACKGROUND_QUEUE",
    "EVENTS_QUEUE",
    "WORKFLOWS_CLASS",
    "WORKFLOWS_INSTANCE",
    "ClientDispatcher",
    "Dispatcher",
    "Intake",
    "Markers",
    "NoWorkerRunning",
    "Submitter",
    "WorkerDispatcher",
    "background_workflow_ids",
    "deliberation_workflow_id",
    "emotion_workflow_id",
    "extraction_workflow_id",
    "worker_liveness",
]

EVENTS_QUEUE = "persyn-events"
BACKGROUND_QUEUE = "persyn-background"
# The DBOS configured instance every Persyn workflow runs on (`runtime.durable.workflows`): recorded
# with each workflow, so a worker in any process finds it by these names.
WORKFLOWS_CLASS = "persyn.Workflows"
WORKFLOWS_INSTANCE = "persyn"
ACTIVATION_WORKFLOW = "persyn.activation"  # `Workflows.activation`'s DBOS name
_WAITING_SECONDS = 60.0  # after this an event enqueued here is taken to have started elsewhere
_WAITING_MAX = 4096  # events enqueued here and not started here, remembered at most
_MARKER_POLL_MAX = 0.1  # seconds between store reads while waiting for a marker
_WORKER_CHECK_SECONDS = 1.0  # between looks at the executor slots while waiting (a few file locks)


class NoWorkerRunning(Exception):
    """No worker process of the deployment is alive to answer `event_id`; it stays queued."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"no worker is running to answer event {event_id}")
        self.event_id = event_id


def deliberation_workflow_id(event_id: str) -> str:
    """The deferred deliberation of an event's activation (a ULID of the event's time)."""
    return derived_id(id_time(event_id), event_id, "deliberation")


def emotion_workflow_id(event_id: str) -> str:
    """The emotional-state reading after an event's exchange (SPEC §4.9)."""
    return derived_id(id_time(event_id), event_id, "emotion")


def extraction_workflow_id(event_id: str) -> str:
    """The incremental extraction an event's activation triggered."""
    return derived_id(id_time(event_id), event_id, "extract")


def background_workflow_ids(event_id: str) -> tuple[str, ...]:
    """The ids of the background workflows an event's activation may start (the threads
    their model calls are attributed to; none of them is an event)."""
    return (
        deliberation_workflow_id(event_id),
        emotion_workflow_id(event_id),
        extraction_workflow_id(event_id),
    )


def worker_liveness(settings: Settings) -> Callable[[], bool] | None:
    """Whether any worker of the deployment is alive (`Markers.wait`): some executor slot
    in its data directory is held by a live process. None where the deployment names its
    executors itself (`[dispatch] executor_id`, `DBOS__VMID`): those hold no slot, so
    nothing here can tell."""
    if settings.dispatch.executor_id or os.environ.get("DBOS__VMID"):
        return None
    directory = executor_directory(settings.data_dir)
    return lambda: bool(live_executors(directory))


class EventMemory(Protocol):
    def remember(self, event: Event) -> None: ...


def _workflow_name(workflow: Callable[..., Any] | str) -> str:
    if isinstance(workflow, str):
        return workflow
    name = getattr(workflow, "dbos_function_name", None)
    if not isinstance(name, str):
        raise TypeError(f"{workflow!r} is not a registered DBOS workflow")
    return name


class Dispatcher(ABC):
    """Enqueues durable work (module docstring)."""

    @abstractmethod
    async def enqueue_once(
        self,
        queue_name: str,
        workflow: Callable[..., Any] | str,
        workflow_id: str,
        *args: Any,
        partition_key: str | None = None,
    ) -> None:
        """Enqueue `workflow(*args)` on `queue_name` under `workflow_id`; a second enqueue
        under the same id attaches to the first (never runs it twice). `workflow` is a
        registered workflow, or its DBOS name where only a client enqueues."""

    def wake(self, queue_name: str) -> None:  # noqa: B027 - a hint; polling is always correct
        """Work was just committed on `queue_name`: a worker here may look now."""

    async def busy(self, agent_id: str) -> bool:
        """Whether an activation of the agent is queued or running (any process)."""
        active = await DBOS.list_queued_workflows_async(
            queue_name=EVENTS_QUEUE, status=["ENQUEUED", "PENDING"], load_input=False, load_output=False
        )
        return any(w.queue_partition_key == agent_id for w in active)

    async def queued_events(self, agent_id: str) -> list[str]:
        """The ids of the agent's activations still waiting in the queue (any process): an
        activation's workflow id is its event's id."""
        waiting = await DBOS.list_queued_workflows_async(
            queue_name=EVENTS_QUEUE, status=["ENQUEUED"], load_input=False, load_output=False
        )
        return [w.workflow_id for w in waiting if w.queue_partition_key == agent_id]

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release what the adapter holds."""


class WorkerDispatcher(Dispatcher):
    """This process runs the queues' workers (it registered `queues` at start)."""

    def __init__(self, queues: dict[str, Queue], waker: QueueWaker | None) -> None:
        self._queues = queues
        self._waker = waker
        self.running_activations = 0  # in this process, for the wake's batching
        # Activations enqueued here and not yet started here (by event id, with when):
        # what an activation's end may let start. Another worker may claim one, so an
        # entry also ends by age.
        self._waiting: dict[str, float] = {}

    def queue(self, name: str) -> Queue:
        queue = self._queues.get(name)
        if queue is None:
            raise RuntimeError(f"the queue {name!r} is not registered; start the runtime with workers")
        return queue

    async def enqueue_once(
        self,
        queue_name: str,
        workflow: Callable[..., Any] | str,
        workflow_id: str,
        *args: Any,
        partition_key: str | None = None,
    ) -> None:
        if isinstance(workflow, str):
            raise TypeError(f"a worker enqueues the workflow itself, not its name {workflow!r}")
        queue = self.queue(queue_name)
        with SetWorkflowID(workflow_id):
            if partition_key is None:
                await queue.enqueue_async(workflow, *args)
            else:
                with SetEnqueueOptions(queue_partition_key=partition_key):
                    await queue.enqueue_async(workflow, *args)
        if queue_name == EVENTS_QUEUE:
            if len(self._waiting) >= _WAITING_MAX:
                self._waiting.pop(next(iter(self._waiting)))
            self._waiting[workflow_id] = time.monotonic()
        self.wake(queue_name)

    def wake(self, queue_name: str) -> None:
        if self._waker is not None:
            busy = queue_name == EVENTS_QUEUE and self.running_activations > 0
            self._waker.wake(queue_name, busy=busy)

    def activation_started(self, event_id: str) -> None:
        self.running_activations += 1
        if self._waker is not None:
            self._waker.touch()
        self._waiting.pop(event_id, None)

    def activation_ended(self) -> None:
        """An activation's task ended (DBOS released its slot): the agent's next event, held
        back by the per-agent partition lock, may start now instead of at the next poll. Only
        an event enqueued here that has not started here can be such a one; with none, a poll
        would claim nothing (work other processes enqueue is found by the polling)."""
        self.running_activations -= 1
        if self._waker is not None:
            self._waker.touch()
        stale = time.monotonic() - _WAITING_SECONDS
        for event_id in [e for e, at in self._waiting.items() if at < stale]:
            del self._waiting[event_id]
        if self._waiting:
            self.wake(EVENTS_QUEUE)


class ClientDispatcher(Dispatcher):
    """Enqueues for the workers through the system database, by workflow name."""

    def __init__(self, client: DBOSClient) -> None:
        self._client = client

    async def enqueue_once(
        self,
        queue_name: str,
        workflow: Callable[..., Any] | str,
        workflow_id: str,
        *args: Any,
        partition_key: str | None = None,
    ) -> None:
        options: EnqueueOptions = {
            "workflow_name": _workflow_name(workflow),
            "queue_name": queue_name,
            "workflow_id": workflow_id,
            "class_name": WORKFLOWS_CLASS,
            "instance_name": WORKFLOWS_INSTANCE,
            "app_version": APPLICATION_VERSION,
        }
        if partition_key is not None:
            options["queue_partition_key"] = partition_key
        await self._client.enqueue_async(options, *args)

    def close(self) -> None:
        self._client.destroy()


class Markers:
    """Completion markers of submitted events, for the submitter to wait on."""

    def __init__(self, store: Store, clock: Clock, in_flight: Callable[[str], bool] | None = None) -> None:
        self._store = store
        self._clock = clock
        # Whether an event's activation is still in flight in this process (submitted here,
        # not yet transmitted): its marker cannot be stored yet unless another worker ran it.
        self._in_flight = in_flight or (lambda _event_id: False)
        self._waiters: dict[str, asyncio.Event] = {}
        self._put: dict[str, CompletionMarker] = {}  # markers put here, for waiters here
        self.transmitting: set[str] = set()  # events whose transmit runs in this process now
        self.worker = False  # this process runs workers (then it most likely runs the event)

    async def wait(
        self,
        agent_id: str,
        event_id: str,
        timeout: float = 300.0,
        *,
        workers_alive: Callable[[], bool] | None = None,
    ) -> CompletionMarker:
        """Wait for the completion marker (SPEC App. B) until the run ends. A marker put by
        this process wakes the waiter at once, and is handed over without reading it back;
        one put by another worker is found by polling the store. A process with workers
        most likely runs the event itself, so it polls every 0.1 s (polling sooner would
        take CPU from the very turn it waits for: a store read each time), and skips the
        first read while the event's activation is in flight here (submitted by this
        process, not yet transmitted): its marker is most likely put here, and one another
        worker put is still found by the next poll. A process that only submits starts at
        5 ms and backs off to 0.1 s.

        `workers_alive` (a process that only submits) is asked at once and then every
        second; when no worker is alive, `NoWorkerRunning` is raised instead of waiting on:
        a slow turn of a live worker is still waited for."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = _MARKER_POLL_MAX if self.worker else 0.005
        next_check = loop.time()
        waiter = self._waiters.setdefault(event_id, asyncio.Event())
        # From here a marker put in this process wakes the waiter: no read is needed to see it.
        read = not (self.worker and self._in_flight(event_id))
        try:
            while True:
                marker = await self._take(agent_id, event_id, read=read)
                if marker is not None:
                    return marker
                if workers_alive is not None and loop.time() >= next_check:
                    if not await asyncio.to_thread(workers_alive):
                        # A worker may have answered and exited since the read above.
                        marker = await self._take(agent_id, event_id)
                        if marker is not None:
                            return marker
                        raise NoWorkerRunning(event_id)
                    next_check = loop.time() + _WORKER_CHECK_SECONDS
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if not read:  # never give up without having looked once
                        read = True
                        continue
                    raise TimeoutError(f"no completion for event {event_id} within {timeout:.0f}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), min(delay, remaining))
                delay = min(delay * 2, _MARKER_POLL_MAX)
                read = True
        finally:
            self._waiters.pop(event_id, None)
            self._put.pop(event_id, None)

    async def _take(self, agent_id: str, event_id: str, *, read: bool = True) -> CompletionMarker | None:
        # While this process transmits the event, its marker is committed with the reply,
        # before the surface is given it: wait for the wake at the end of transmit, so the
        # waiter never returns ahead of the delivery.
        if event_id in self.transmitting:
            return None
        # Expiry keeps the table bounded; it must not hide the marker of an event this
        # process is waiting for, which a daemon on another clock (the sender's moved by
        # `--now`) may have stamped to expire before the sender's "now".
        put = self._put.pop(event_id, None)
        if put is not None or not read:
            return put
        return await self._store.get_marker(agent_id, event_id, _EPOCH)

    def put(self, marker: CompletionMarker) -> None:
        """A marker is stored (committed): a waiter in this process may take it as is."""
        if marker.event_id in self._waiters:
            self._put[marker.event_id] = marker

    def wake(self, event_id: str) -> None:
        waiter = self._waiters.get(event_id)
        if waiter is not None:
            waiter.set()


class Intake:
    """Where events enter: validated, persisted, then their activation enqueued (dedup by
    event id). The dispatchers are chosen when the runtime starts: the worker's (or the
    client's, in a process that only submits), and a client's for submits from inside a
    durable step (the scheduler's: a step may not start workflows itself)."""

    def __init__(self, store: Store, settings: Settings, cache: EventMemory) -> None:
        self._store = store
        self._settings = settings
        self._agents = {agent.id for agent in settings.agents}
        self._cache = cache
        self._dispatcher: Dispatcher | None = None
        self._from_step: Dispatcher | None = None
        self._activation: Callable[..., Any] | str | None = None

    def open(self, dispatcher: Dispatcher, activation: Callable[..., Any] | str) -> None:
        self._dispatcher, self._activation = dispatcher, activation

    def open_for_steps(self, dispatcher: Dispatcher) -> None:
        self._from_step = dispatcher

    def close(self) -> None:
        for dispatcher in {id(d): d for d in (self._dispatcher, self._from_step) if d is not None}.values():
            if isinstance(dispatcher, ClientDispatcher):
                dispatcher.close()
        self._dispatcher = self._from_step = self._activation = None

    @property
    def dispatcher(self) -> Dispatcher:
        if self._dispatcher is None:
            raise RuntimeError("the runtime is not started")
        return self._dispatcher

    def validate_text(self, text: str | bytes) -> str:
        """Reject what must not enter the pipeline; nothing is stored for rejected input."""
        return validate_message_text(text, self._settings.conversation.max_message_chars)

    async def submit(self, event: Event, *, from_step: bool = False) -> str:
        """Persist the event, then enqueue its activation (dedup by event id). From inside a
        durable step (the scheduler's), the enqueue goes through a DBOS client: a step may
        not start workflows itself, and the event id keeps it exactly-once either way."""
        parse_id(event.id, what="event id")
        if event.agent_id not in self._agents:
            raise InputError(f"unknown agent id {event.agent_id!r}")
        self.validate_text(event.text)
        await self._store.save_event(event)
        if not from_step:  # the activation will most likely run here: it need not read it back
            self._cache.remember(event)
        await self.enqueue_activation(event.agent_id, event.id, from_step=from_step)
        return event.id

    async def enqueue_activation(self, agent_id: str, event_id: str, *, from_step: bool = False) -> None:
        dispatcher = (self._from_step if from_step else None) or self.dispatcher
        if self._activation is None:
            raise RuntimeError("the runtime is not started")
        await dispatcher.enqueue_once(
            EVENTS_QUEUE, self._activation, event_id, agent_id, event_id, partition_key=agent_id
        )
        if dispatcher is not self.dispatcher:  # through a client: wake this process's worker too
            self.dispatcher.wake(EVENTS_QUEUE)

    async def busy(self, agent_id: str) -> bool:
        return await self.dispatcher.busy(agent_id)

    async def queued_events(self, agent_id: str) -> list[str]:
        return await self.dispatcher.queued_events(agent_id)


class _Unremembered:
    """A submitter runs no activation: nothing to keep the event for."""

    def remember(self, event: Event) -> None:
        pass


class Submitter:
    """A process that only submits (`persyn send`): the store, an intake that enqueues through
    a DBOS client, and the markers to wait on. `async with Submitter(settings, clock) as s:`."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.store = open_store(settings.database_url)
        self.intake = Intake(self.store, settings, _Unremembered())
        self.markers = Markers(self.store, clock)
        self._engine: Engine | None = None

    async def __aenter__(self) -> Submitter:
        await self.store.setup()
        url = self.settings.dbos_database_url
        try:
            # It may run before any worker ever started: the system database must exist
            # (idempotent).
            await asyncio.to_thread(DBOS.migrate, url)
            self._engine = dbos_sqlite_engine(url)
            client = await asyncio.to_thread(
                DBOSClient, system_database_url=url, system_database_engine=self._engine
            )
        except BaseException:
            await self._close()
            raise
        self.intake.open(ClientDispatcher(client), ACTIVATION_WORKFLOW)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _close(self) -> None:
        self.intake.close()
        if self._engine is not None:
            self._engine.dispose()  # DBOS does not dispose of an engine it was given
            self._engine = None
        await self.store.close()
