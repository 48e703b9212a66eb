"""The runtime: one process's view of a deployment, and its lifespan.

`Runtime` is the container `runtime.compose.build_runtime` fills: the store, the meter, one
model gateway per agent, the channel adapters, the activation's steps and the DBOS workflows
bound to them. `async with runtime:` (or `start()` / `stop()`) sets up storage, starts local
models, launches DBOS as a worker (or connects as a client only) and shuts it all down again.
Channels call `submit(event)` and `wait_marker`; workers run `Workflows.activation`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig, Queue
from sqlalchemy import Engine

from persyn.channels.base import Channel
from persyn.cognition import deliberation
from persyn.cognition.goals import GoalsSource
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.events import CompletionMarker, Event, Speaker
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.local import OFFLINE_NOTICE
from persyn.memory.embedder import Embedder
from persyn.memory.retrieval import Retriever
from persyn.people.observations import Dossiers
from persyn.runtime import speakers
from persyn.runtime._dbos_shutdown import shutdown_dbos
from persyn.runtime._dbos_sqlite import dbos_sqlite_engine
from persyn.runtime._dbos_wake import install_queue_waker
from persyn.runtime._executor import (
    ExecutorSlot,
    adopt_dead_executors,
    claim_executor_slot,
    executor_directory,
)
from persyn.runtime.activation import ActivationSteps, TurnCache, record_deliberation
from persyn.runtime.autonomy import (
    Autonomy,
    BudgetedModel,
)
from persyn.runtime.conversation_jobs import ConversationHook, ConversationJobs, JobWorkflow, JobWorkflows
from persyn.runtime.dispatch import (
    BACKGROUND_QUEUE,
    EVENTS_QUEUE,
    ClientDispatcher,
    Intake,
    Markers,
    WorkerDispatcher,
)
from persyn.runtime.durable import APPLICATION_VERSION
from persyn.runtime.housekeeping import Housekeeping
from persyn.runtime.local_models import LocalModels
from persyn.runtime.outbox import Outbox, reply_key
from persyn.runtime.outreach import Outreach
from persyn.runtime.speakers import DISPLAY_NAME_PREF
from persyn.runtime.tool_steps import ToolSteps
from persyn.runtime.transmit import Transmitter
from persyn.runtime.turn import TransmitRequest, TransmitResult
from persyn.runtime.workflows import AUTO_SPEAK, Workflows, scheduler_tick
from persyn.schedule import bootstrap_heartbeat
from persyn.store import Store
from persyn.store.base import Conversation, Message
from persyn.usage.meter import Meter
from persyn.usage.prometheus import PrometheusAdapter

__all__ = ["AUTO_SPEAK", "DISPLAY_NAME_PREF", "ConversationHook", "Runtime"]


log = logging.getLogger(__name__)


class Runtime:
    """One process's view of a deployment: every configured agent, shared infrastructure.
    Built by `runtime.compose.build_runtime`, which wires every collaborator."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        store: Store,
        meter: Meter,
        prometheus: PrometheusAdapter | None,
        cache: TurnCache,
        markers: Markers,
        intake: Intake,
        autonomy: Autonomy,
        local_models: LocalModels,
        gateways: dict[str, ModelGateway],
        channels: dict[str, Channel],
        context_sources: list[ContextSource],
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.store = store
        self.meter = meter
        self._prometheus = prometheus
        self.cache = cache
        self.markers = markers
        self.intake = intake
        self.autonomy = autonomy
        self.local_models = local_models
        self.agents: dict[str, AgentConfig] = {a.id: a for a in settings.agents}
        self.gateways = gateways  # one per agent, built at start (local models come first)
        self.channels = channels
        self.context_sources = context_sources
        self._background: set[asyncio.Task[None]] = set()
        self.embedder: Embedder | None = None
        self.retriever: Retriever | None = None
        self.memory_degraded: str | None = None
        self._launched = False
        self._dbos_engine: Engine | None = None
        self._executor_slot: ExecutorSlot | None = None
        self._queues: dict[str, Queue] = {}  # as registered at start (reading one back costs a query)
        self.jobs = ConversationJobs(
            settings,
            store=self.store,
            clock=self.clock,
            agents=self.agents,
            gateway=self.gateway,
            enqueue=self._enqueue_background,
        )
        self.housekeeping = Housekeeping(
            settings, store=self.store, clock=self.clock, agents=self.agents, jobs=self.jobs
        )
        self.outbox = Outbox(
            self.store,
            self.clock,
            self.channels.get,
            keep=timedelta(days=settings.dispatch.outbox_keep_days),
        )
        self.outreach = Outreach(
            store=self.store,
            settings=settings,
            clock=self.clock,
            agents=self.agents,
            outbox=self.outbox,
            event_of=self._event,
            validate_text=self.validate_text,
            connected=lambda service: service in self.channels,
        )
        self.transmitter = Transmitter(
            store=self.store,
            settings=settings,
            clock=self.clock,
            agents=self.agents,
            channels=self.channels.get,
            outbox=self.outbox,
            outreach=self.outreach,
            turn_dialog=self._turn_dialog,
            record_deliberation=self._record_deliberation,
            run_stopped=self._run_stopped,
            marker_put=self._marker_put,
        )
        self._worker: WorkerDispatcher | None = None

    def bind_workflows(self, activation: ActivationSteps, tools: ToolSteps, workflows: Workflows) -> None:
        """The activation's steps and the DBOS workflows over them (they call back into
        this runtime's transmit and conversation jobs, so they are built after it)."""
        self.activation = activation
        self.tools = tools
        self.workflows = workflows
        self.jobs.bind_workflows(
            JobWorkflows(
                close_hooks=workflows.conversation_closed, consolidation_retry=workflows.consolidation_retry
            )
        )

    # lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self, *, workers: bool = True, scheduler: bool = True, role: str | None = None) -> None:
        """Set up storage, start the local model if any task needs it, launch DBOS.

        A process with workers is a DBOS executor with an id of its own (`role`, default
        `run` with the scheduler and `worker` without, plus a slot: `runtime/_executor.py`),
        so DBOS recovers only its own unfinished turns, and those of dead executors of this
        host — never a turn running in a live process."""
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        await self.store.setup()
        for agent in self.agents.values():
            await self.store.ensure_agent(agent.id, agent.name, self.clock.now())
        await self.local_models.start(self.agents.values())
        self._spawn(
            self.outbox.run(
                lambda: list(self.channels), list(self.agents), self.settings.dispatch.outbox_poll_seconds
            )
        )
        for agent in self.agents.values():
            self.gateways[agent.id] = ModelGateway(
                self.settings,
                agent,
                self.meter,
                local_factory=self.local_models.model,
                clock=self.clock,
                wrappers=[lambda model: BudgetedModel(model, self.autonomy)],
            )
        self._start_memory()
        self._start_graph()
        self.context_sources.append(
            GoalsSource(self.store, self.settings.memory.channel_groups, on_read=self.autonomy.noticed)
        )
        if self._prometheus is not None:
            self._prometheus.start(
                self.settings.metering.prometheus_port, self.settings.metering.prometheus_host
            )
        dbos_url = self.settings.dbos_database_url
        self._dbos_engine = dbos_sqlite_engine(dbos_url)
        config: DBOSConfig = {
            "name": "persyn",
            "system_database_url": dbos_url,
            "log_level": self.settings.log_level.upper(),
            # The step protocol's version, not a hash of the code (`runtime.durable`).
            "application_version": APPLICATION_VERSION,
        }
        if self._dbos_engine is not None:
            config["system_database_engine"] = self._dbos_engine
        if not workers:
            # A process that only submits (`persyn send`) enqueues for the workers through
            # the system database, without becoming an executor itself.
            # It may run before any worker ever started, so it makes sure the system
            # database exists (idempotent).
            await asyncio.to_thread(DBOS.migrate, self.settings.dbos_database_url)
            self.intake.open(ClientDispatcher(await self._client()), self.workflows.activation)
            return
        config["executor_id"] = self._executor_id(role or ("run" if scheduler else "worker"))
        DBOS(config=config)
        # Launched from inside the running loop so queued workflows run on it: live
        # token sinks and adapters then need no cross-thread marshalling.
        DBOS.launch()
        self._launched = True
        if self._executor_slot is not None:
            adopted = await asyncio.to_thread(
                adopt_dead_executors,
                self._executor_dir,
                self._executor_slot.executor_id,
                DBOS._recover_pending_workflows,  # pyright: ignore[reportPrivateUsage]
            )
            if adopted:
                log.info("recovered the unfinished work of dead executors %s", ", ".join(adopted))
        polling = self.settings.dispatch.queue_polling_seconds
        # partition_concurrency=1 over partition key agent_id *is* the per-agent lock
        # (SPEC §7), across processes and hosts sharing the system database.
        self._queues[EVENTS_QUEUE] = await DBOS.register_queue_async(
            EVENTS_QUEUE,
            partition_concurrency=1,
            worker_concurrency=self.settings.dispatch.worker_concurrency,
            polling_interval_sec=polling,
        )
        self._queues[BACKGROUND_QUEUE] = await DBOS.register_queue_async(
            BACKGROUND_QUEUE,
            worker_concurrency=max(1, self.settings.dispatch.worker_concurrency // 4),
            polling_interval_sec=max(polling * 2, 0.5),
        )
        # Enqueues from this process wake the queue's worker at once; polling remains
        # for work other processes enqueue.
        self._worker = WorkerDispatcher(self._queues, install_queue_waker())
        self.workflows.dispatcher = self._worker
        self.markers.worker = True
        self.intake.open(self._worker, self.workflows.activation)
        if scheduler:
            self._spawn(self._housekeeping())
            await self._start_autonomy()

    async def _client(self) -> DBOSClient:
        return await asyncio.to_thread(
            DBOSClient,
            system_database_url=self.settings.dbos_database_url,
            system_database_engine=self._dbos_engine,
        )

    @property
    def _executor_dir(self) -> Path:
        return executor_directory(self.settings.data_dir)

    def _executor_id(self, role: str) -> str:
        """`[dispatch] executor_id` (or DBOS's own `DBOS__VMID`) when set — the operator
        keeps it unique per process — or a slot of `role` held for the life of this runtime."""
        explicit = self.settings.dispatch.executor_id or os.environ.get("DBOS__VMID")
        if explicit:
            return explicit
        if self._executor_slot is None:
            self._executor_slot = claim_executor_slot(self._executor_dir, role)
        return self._executor_slot.executor_id

    async def stop(self, *, grace: float = 5.0) -> None:
        """Shut down. Workflows still running here get `grace` seconds to finish; the rest
        resume in the next process (`runtime/_dbos_shutdown.py`)."""
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._launched:
            await shutdown_dbos(grace)
            # DBOS made its (now shut down) pool this loop's default executor at launch.
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(thread_name_prefix="persyn"))
            self._launched = False
        self.intake.close()
        self.workflows.dispatcher = None
        self._worker = None
        if self._dbos_engine is not None:
            self._dbos_engine.dispose()  # DBOS does not dispose of an engine it was given
            self._dbos_engine = None
        self._queues.clear()
        if self._executor_slot is not None:  # only once DBOS no longer runs under it
            self._executor_slot.release()
            self._executor_slot = None
        for gateway in self.gateways.values():
            await gateway.aclose()
        await asyncio.to_thread(self.meter.close)
        if self._prometheus is not None:
            self._prometheus.stop()
        await self.local_models.stop()
        await self.store.close()

    # conversation jobs (runtime/conversation_jobs.py): delegated ---------------------------
    def _start_memory(self) -> None:
        memory = self.jobs.start_memory(self.context_sources, self.autonomy.noticed)
        self.embedder, self.retriever, self.memory_degraded = (
            memory.embedder,
            memory.retriever,
            memory.degraded,
        )

    def _start_graph(self) -> None:
        self.jobs.start_graph(self.context_sources, self.autonomy.noticed)

    def dossiers(self, agent_id: str) -> Dossiers:
        return self.jobs.dossiers(agent_id)

    async def observe_conversation(self, agent_id: str, conversation_id: str, *, closed: bool = True) -> None:
        await self.jobs.observe_conversation(agent_id, conversation_id, closed=closed)

    async def observe_so_far(self, agent_id: str, conversation_id: str) -> None:
        await self.jobs.observe_so_far(agent_id, conversation_id)

    async def graph_conversation(self, agent_id: str, conversation_id: str, *, closed: bool = True) -> None:
        await self.jobs.graph_conversation(agent_id, conversation_id, closed=closed)

    async def graph_so_far(self, agent_id: str, conversation_id: str) -> None:
        await self.jobs.graph_so_far(agent_id, conversation_id)

    def graph_budget(self, agent_id: str) -> int:
        return self.jobs.graph_budget(agent_id)

    def memory_budget(self, agent_id: str) -> int:
        return self.jobs.memory_budget(agent_id)

    async def consolidate_conversation(self, agent_id: str, conversation_id: str) -> None:
        await self.jobs.consolidate_conversation(agent_id, conversation_id)

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # models ----------------------------------------------------------------------------
    def gateway(self, agent_id: str) -> ModelGateway:
        return self.gateways[agent_id]

    def offline_notice(self) -> str | None:
        if not self.local_models.in_use:
            return None
        if any(self.activation.tiny_deliberator(agent_id) for agent_id in self.agents):
            return (
                OFFLINE_NOTICE + " Self-critique is off with the tiny model ([deliberation] offline_model)."
            )
        return OFFLINE_NOTICE

    # channels (runtime/api.py: what a channel may call) ---------------------------------
    async def attach_channel(self, channel: Channel) -> int:
        """Connect `channel` in this process; deliver what waited for it in the outbox
        (marked `while_away`). Returns how many messages that was."""
        self.channels[channel.service] = channel
        return await self.outbox.attach(channel, [a for a in self.agents if channel.serves(a)])

    def detach_channel(self, channel: Channel) -> None:
        if self.channels.get(channel.service) is channel:
            del self.channels[channel.service]

    async def deliver_pending(self, service: str) -> int:
        """Deliver now what the outbox holds for `service`, written by any process."""
        return sum([await self.outbox.flush(service, agent_id) for agent_id in self.agents])

    async def deliver_reply(self, agent_id: str, event_id: str, timeout: float = 5.0) -> bool:
        """The marker says the reply to `event_id` was transmitted, perhaps by another
        process, which writes its outbox row just after the marker: wait (bounded) for the
        row, and deliver it here if its channel is connected here. False if no row came."""
        key = reply_key(event_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            row = await self.store.get_outbox(agent_id, key)
            if row is not None:
                if row.delivered_at is None:
                    await self.outbox.flush(row.service, agent_id)
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)  # the row follows the marker within milliseconds

    async def _run_stopped(self, event: Event) -> str | None:
        return (await self.autonomy.spent(event)).stopped

    # people, for channels (which never reach into stores) -------------------------------
    async def resolve_speaker(self, agent_id: str, speaker: Speaker) -> tuple[str, str | None]:
        """The person id behind a speaker and the name they chose (`runtime.speakers`)."""
        return await speakers.resolve_speaker(self.store, agent_id, speaker, self.clock.now())

    async def remember_display_name(self, agent_id: str, person_id: str, name: str) -> None:
        await speakers.remember_display_name(self.store, agent_id, person_id, name)

    # ingestion and dispatch (`runtime.dispatch`) --------------------------------------------
    def validate_text(self, text: str | bytes) -> str:
        return self.intake.validate_text(text)

    async def submit(self, event: Event, *, from_step: bool = False) -> str:
        return await self.intake.submit(event, from_step=from_step)

    async def busy(self, agent_id: str) -> bool:
        """Whether an activation of the agent is queued or running (any process)."""
        return await self.intake.busy(agent_id)

    async def wait_marker(self, agent_id: str, event_id: str, timeout: float = 300.0) -> CompletionMarker:
        return await self.markers.wait(agent_id, event_id, timeout)

    def wake_queue(self, queue_name: str) -> None:
        if self._worker is not None:
            self._worker.wake(queue_name)

    def _marker_put(self, marker: CompletionMarker) -> None:
        self.markers.put(marker)

    def _wake(self, event_id: str) -> None:
        self.markers.wake(event_id)

    @property
    def _transmitting(self) -> set[str]:
        return self.markers.transmitting

    # the turn cache, for transmit (`runtime.activation.TurnCache`) ---------------------------
    async def _event(self, agent_id: str, event_id: str) -> Event:
        return await self.cache.event(agent_id, event_id)

    def known_event(self, event_id: str) -> Event | None:
        return self.cache.known(event_id)

    @property
    def _events(self) -> dict[str, Event]:
        return self.cache.events

    @property
    def _dialogs(self) -> dict[str, list[Message]]:
        return self.cache.dialogs

    async def _turn_dialog(self, setup: TurnSetup) -> list[Message]:
        return await self.cache.dialog(setup)

    async def _record_deliberation(self, agent_id: str, event_id: str, trace: dict[str, Any]) -> None:
        await record_deliberation(self.store, agent_id, event_id, trace, self.clock.now())

    async def _gate(self, setup: TurnSetup, text: str) -> deliberation.Decision | None:
        """Hard gates before anything is sent (`Transmitter.gate`)."""
        return await self.transmitter.gate(setup, text)

    async def transmit(
        self, agent_id: str, event_id: str, setup: TurnSetup, outcome: TransmitRequest
    ) -> TransmitResult:
        """Act on the decision: speak (or decline, in words), redirect, or stay silent.

        Exactly one completion marker per event, whatever happened (SPEC App. B). A waiter
        in this process is woken once the surface has been given the outcome."""
        self._transmitting.add(event_id)
        try:
            return await self._transmit(agent_id, event_id, setup, outcome)
        finally:
            self._transmitting.discard(event_id)
            self._dialogs.pop(event_id, None)
            self._wake(event_id)

    async def _transmit(
        self, agent_id: str, event_id: str, setup: TurnSetup, outcome: TransmitRequest
    ) -> TransmitResult:
        event = await self._event(agent_id, event_id)
        self._events.pop(event_id, None)  # the last step that needs it
        return await self.transmitter.transmit(event, setup, outcome)

    # autonomy (SPEC §4.7) ---------------------------------------------------------------
    async def _start_autonomy(self) -> None:
        """Bootstrap each agent's heartbeat (once ever: a deleted one stays deleted) and the
        DBOS schedule that fires due reminders."""
        every = int(self.settings.autonomy.heartbeat_minutes * 60)
        for agent in self.agents.values():
            await bootstrap_heartbeat(self.store, agent.id, every, self.clock.now())
        self.intake.open_for_steps(ClientDispatcher(await self._client()))
        if not self.settings.autonomy.schedule:
            return
        tick = self.settings.autonomy.tick_seconds
        await DBOS.apply_schedules_async(
            [
                {
                    "schedule_name": "persyn-reminders",
                    "workflow_fn": scheduler_tick,
                    "schedule": f"*/{tick} * * * * *",
                    "queue_name": BACKGROUND_QUEUE,
                }
            ]
        )

    async def send_to_contact(
        self,
        agent_id: str,
        event_id: str,
        person_id: str,
        service: str,
        channel: str,
        text: str,
        *,
        call_key: str | None = None,
    ) -> str:
        """The agent initiates (SPEC §4.5): `Outreach.send_to_contact`."""
        return await self.outreach.send_to_contact(
            agent_id, event_id, person_id, service, channel, text, call_key=call_key
        )

    async def _check_outreach_audience(
        self, agent_id: str, event_id: str, person_id: str, service: str, channel: str
    ) -> None:
        await self.outreach.check_audience(agent_id, event_id, person_id, service, channel)

    async def messages_sent(self, agent_id: str, event_id: str) -> int:
        return await self.outreach.messages_sent(agent_id, event_id)

    async def _count_outreach(self, agent_id: str, event_id: str, call_key: str | None) -> None:
        await self.outreach.count_outreach(agent_id, event_id, call_key)

    async def _spend_channel_budget(
        self, agent_id: str, service: str, channel: str, text: str, now: Any
    ) -> None:
        await self.outreach.spend_channel_budget(agent_id, service, channel, text, now)

    async def _reply_budget_spent(self, setup: TurnSetup) -> str | None:
        return await self.outreach.reply_budget_spent(setup)

    async def _spend_reply_budget(
        self, agent_id: str, event_id: str, service: str, channel: str, text: str, now: Any
    ) -> None:
        await self.outreach.spend_reply_budget(agent_id, event_id, service, channel, text, now)

    # conversations (runtime/conversation_jobs.py, runtime/housekeeping.py): delegated -----
    async def _enqueue_background(
        self, workflow_id: str, workflow: JobWorkflow, agent_id: str, conversation_id: str
    ) -> bool:
        """`ConversationJobs`' way onto the background queue: once per id (DBOS returns the
        existing workflow for a reused id). False where no workers run here."""
        if self._worker is None:  # not a worker: the hooks run where the workers are
            return False
        await self._worker.enqueue_once(BACKGROUND_QUEUE, workflow, workflow_id, agent_id, conversation_id)
        return True

    async def enqueue_close_hooks(self, conversation: Conversation) -> None:
        await self.jobs.enqueue_close_hooks(conversation)

    def add_conversation_hook(self, name: str, hook: ConversationHook) -> None:
        self.jobs.add_conversation_hook(name, hook)

    def conversation_hook_names(self) -> list[str]:
        return self.jobs.conversation_hook_names()

    async def run_conversation_hook(self, agent_id: str, conversation_id: str, name: str) -> None:
        await self.jobs.run_conversation_hook(agent_id, conversation_id, name)

    def extraction_due(self, conversation_id: str, new_messages: int) -> bool:
        return self.jobs.extraction_due(conversation_id, new_messages)

    def add_extraction(self, name: str, hook: ConversationHook) -> None:
        self.jobs.add_extraction(name, hook)

    def extraction_names(self) -> list[str]:
        return self.jobs.extraction_names()

    async def run_extraction(self, agent_id: str, conversation_id: str, name: str) -> None:
        await self.jobs.run_extraction(agent_id, conversation_id, name)

    async def close_idle_conversations(self) -> int:
        return await self.housekeeping.close_idle_conversations()

    async def sweep_unconsolidated(self, grace: timedelta = timedelta(minutes=1)) -> int:
        return await self.housekeeping.sweep_unconsolidated(grace)

    async def cull_memories(self) -> int:
        return await self.housekeeping.cull_memories()

    async def purge_old_dialog(self) -> int:
        return await self.housekeeping.purge_old_dialog()

    async def _housekeeping(self) -> None:
        await self.housekeeping.run()
