"""The runtime: one process's view of a deployment, and its lifespan.

`Runtime` holds what `runtime.compose.build_runtime` builds (`RuntimeParts`: the store, the
meter, the turn cache and markers, intake, autonomy, conversation jobs, housekeeping, the
outbox, outreach, transmit, the activation's steps and the DBOS workflows over them) and
runs their lifespan: `async with runtime:` (or `start()` / `stop()`) sets up storage, starts
local models and one model gateway per agent, launches DBOS as a worker (or connects as a
client only), opens the dispatchers, and shuts it all down again. It adds no behaviour of its
own beyond that and the channel surface (`RuntimeAPI`: attach, deliver, resolve speakers,
submit, wait for a marker); code that needs a collaborator's work calls the collaborator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from dbos import DBOS, DBOSClient, DBOSConfig, Queue
from sqlalchemy import Engine

from persyn.cognition.goals import GoalsSource
from persyn.cognition.pipeline import ContextSource
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError, StoreError
from persyn.core.events import Attachment, CompletionMarker, Event, Speaker, Upload
from persyn.gateway.checkpoints import CheckpointedModel, StepCalls
from persyn.gateway.gateway import ModelGateway, ModelWrapper
from persyn.memory.embedder import Embedder, EmbedderUnavailable, warm_embedder
from persyn.runtime.background.autonomy import Autonomy, BudgetedModel
from persyn.runtime.background.conversation_jobs import ConversationHook, ConversationJobs, JobQueue
from persyn.runtime.background.housekeeping import Housekeeping
from persyn.runtime.background.outreach import Outreach
from persyn.runtime.background.reminder_timer import ReminderTimer
from persyn.runtime.channel import Channel, ConnectionState, safe_sink
from persyn.runtime.delivery.bus import LiveBus, live_bus
from persyn.runtime.delivery.outbox import Outbox, reply_key
from persyn.runtime.durable._executor import (
    ExecutorSlot,
    adopt_dead_executors,
    claim_executor_slot,
    executor_directory,
)
from persyn.runtime.durable._executor_pg import PostgresLiveness, is_postgres_url
from persyn.runtime.durable._shutdown import shutdown_dbos
from persyn.runtime.durable._system_sqlite import dbos_sqlite_engine
from persyn.runtime.durable._wake import install_queue_waker
from persyn.runtime.durable.dispatch import (
    BACKGROUND_QUEUE,
    EVENTS_QUEUE,
    ClientDispatcher,
    Intake,
    Markers,
    WorkerDispatcher,
)
from persyn.runtime.durable.steps import APPLICATION_VERSION
from persyn.runtime.durable.workflows import AUTO_SPEAK, Workflows, scheduler_tick
from persyn.runtime.local_models import LocalModels
from persyn.runtime.turn import speakers
from persyn.runtime.turn.activation import ActivationSteps, TurnCache
from persyn.runtime.turn.live import LiveVoice
from persyn.runtime.turn.senses import Senses
from persyn.runtime.turn.speakers import DISPLAY_NAME_PREF
from persyn.runtime.turn.tool_steps import ToolSteps
from persyn.runtime.turn.transmit import Transmitter
from persyn.schedule import bootstrap_heartbeat
from persyn.senses.hearing import Transcriber, Transcript
from persyn.store import Store
from persyn.store.capabilities import ScheduleStore, capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.model_calls import ModelCallsPort
from persyn.tracing import Tracing
from persyn.usage import context as usage_context
from persyn.usage.meter import Meter
from persyn.usage.prometheus import PrometheusAdapter

__all__ = ["AUTO_SPEAK", "DISPLAY_NAME_PREF", "ConversationHook", "Runtime", "RuntimeParts"]


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeParts:
    """The collaborators `build_runtime` builds for a runtime to hold and start. `gateways`
    and `channels` are the live maps the parts share (gateways are built at start, once
    local models run; channels connect and disconnect while it runs)."""

    cache: TurnCache
    markers: Markers
    intake: Intake
    autonomy: Autonomy
    local_models: LocalModels
    gateways: dict[str, ModelGateway]
    channels: dict[str, Channel]
    context_sources: list[ContextSource]
    jobs: ConversationJobs
    job_queue: JobQueue
    housekeeping: Housekeeping
    reminder_timer: ReminderTimer | None  # None: no reminders in the store, or `watch_seconds = 0`
    outbox: Outbox
    outreach: Outreach
    transmitter: Transmitter
    activation: ActivationSteps
    tools: ToolSteps
    workflows: Workflows
    tracing: Tracing
    senses: Senses
    live: LiveVoice


class Runtime:
    """One process's view of a deployment: every configured agent, shared infrastructure.
    Built by `runtime.compose.build_runtime`, which builds and wires every collaborator; the
    runtime holds them, runs their lifespan and answers channels (`RuntimeAPI`). Code that
    needs a collaborator's work calls the collaborator (`runtime.housekeeping`,
    `runtime.jobs`, `runtime.outreach`, `runtime.transmitter`, ...), not the runtime."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        store: Store,
        meter: Meter,
        prometheus: PrometheusAdapter | None,
        parts: RuntimeParts,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.store = store
        self.meter = meter
        self._prometheus = prometheus
        self._step_calls = StepCalls()  # numbers the model calls of each durable step (§8)
        self.agents: dict[str, AgentConfig] = {a.id: a for a in settings.agents}
        self.cache = parts.cache
        self.markers = parts.markers
        self.intake = parts.intake
        self.autonomy = parts.autonomy
        self.local_models = parts.local_models
        self.gateways = parts.gateways  # one per agent, built at start (local models come first)
        self.channels = parts.channels
        self.context_sources = parts.context_sources
        self.jobs = parts.jobs
        self.job_queue = parts.job_queue
        self.housekeeping = parts.housekeeping
        self.reminder_timer = parts.reminder_timer
        self.outbox = parts.outbox
        self.outreach = parts.outreach
        self.transmitter = parts.transmitter
        self.activation = parts.activation
        self.tools = parts.tools
        self.workflows = parts.workflows
        self.tracing = parts.tracing
        self.senses = parts.senses
        self.live_voice = parts.live
        self.embedder: Embedder | None = None  # set at start (None: keyword recall only)
        self._background: set[asyncio.Task[None]] = set()
        self._launched = False
        self._dbos_engine: Engine | None = None
        self._executor_slot: ExecutorSlot | None = None
        self._liveness: PostgresLiveness | None = None
        self.live: LiveBus = live_bus(self.settings)
        self._queues: dict[str, Queue] = {}  # as registered at start (reading one back costs a query)
        self._worker: WorkerDispatcher | None = None

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
        `run` with the scheduler and `worker` without, plus a slot: `runtime/durable/_executor.py`),
        so DBOS recovers only its own unfinished turns, and those of dead executors of this
        host — never a turn running in a live process."""
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        await self.store.setup()
        self.outbox.announcer = self.live.announce_outbox
        self.activation.remote_sink = self.live.remote_sink
        await self.live.start(
            self._outbox_woken, lambda event: safe_sink(self.channels.get(event.service), event)
        )
        for agent in self.agents.values():
            await self.store.ensure_agent(agent.id, agent.name, self.clock.now())
        await self.local_models.start(self.agents.values())
        if workers:  # only a process that runs turns records their traces
            self.tracing.start()
        self._spawn(
            self.outbox.run(
                lambda: list(self.channels), list(self.agents), self.settings.dispatch.outbox_poll_seconds
            )
        )
        # Outermost last: a call replayed from its checkpoint is neither admitted nor charged
        # again (§8). A store without model-call checkpoints (`store/capabilities.py`) replays
        # a step's calls by making them again.
        checkpoints = capability(self.store, ModelCallsPort)
        wrappers: list[ModelWrapper] = [lambda model: BudgetedModel(model, self.autonomy)]
        if checkpoints is not None:
            wrappers.append(
                lambda model: CheckpointedModel(
                    model, checkpoints=checkpoints, calls=self._step_calls, clock=self.clock
                )
            )
        for agent in self.agents.values():
            self.gateways[agent.id] = ModelGateway(
                self.settings,
                agent,
                self.meter,
                local_factory=self.local_models.model,
                clock=self.clock,
                wrappers=wrappers,
                tracing=self.tracing,
                admission=self.autonomy.admit_current,
            )
        await self.tools.start()
        self.embedder = self.jobs.start_memory(self.context_sources, self.autonomy.noticed).embedder
        if workers:
            self._spawn(self._warm_recall())
        self.jobs.start_graph(self.context_sources, self.autonomy.noticed)
        schedule = capability(self.store, ScheduleStore)
        if schedule is not None:  # a store without goals: no goals section
            self.context_sources.append(
                GoalsSource(
                    schedule,
                    self.settings.memory.channel_groups,
                    on_read=self.autonomy.noticed,
                    listed=self.cache.open_goals,
                )
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
        if is_postgres_url(dbos_url):  # liveness other hosts can see (`_executor_pg.py`)
            self._liveness = PostgresLiveness(dbos_url)
            await asyncio.to_thread(self._liveness.hold, config["executor_id"])
        DBOS(config=config)
        # Launched from inside the running loop so queued workflows run on it: live
        # token sinks and adapters then need no cross-thread marshalling.
        DBOS.launch()
        self._launched = True
        await self._adopt_dead_executors()
        self._spawn(self._watch_dead_executors(self.settings.dispatch.dead_executor_seconds))
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
        self._worker = WorkerDispatcher(
            self._queues, install_queue_waker(self.settings.dispatch.quiet_polling_seconds)
        )
        self.workflows.dispatcher = self._worker
        self.job_queue.open(self._worker)
        self.markers.worker = True
        self.intake.open(self._worker, self.workflows.activation)
        if scheduler:
            self._spawn(self.housekeeping.run())
            await self._start_autonomy()

    async def _warm_recall(self) -> None:
        """Load what each agent's recall reads before its first turn needs it: the local
        encoder's weights (~0.3 s for WordLlama) and each agent's vector indexes. Best
        effort: a failure leaves the first recall to load it (and degrade), as without the warm-up."""
        try:
            if self.embedder is not None and await warm_embedder(self.embedder):
                log.info("encoder %s loaded", self.embedder.name)
        except EmbedderUnavailable as exc:
            log.warning("encoder not loaded ahead of the first recall: %s", exc)
        memory = self.jobs.memory
        if memory is None:
            return  # no memory, no recall to warm
        for agent in self.agents.values():
            try:
                loaded = await memory.warm_recall(agent.id)
            except StoreError as exc:
                log.warning("recall for agent %s not warmed: %s", agent.id, exc)
                continue
            if loaded:
                log.info("recall for agent %s: %d vector index(es) loaded", agent.id, loaded)

    async def _adopt_dead_executors(self) -> None:
        """Take over the PENDING work of executors that died: this host's by their slot
        lock files, any host's by their PostgreSQL liveness lock."""
        recover = DBOS._recover_pending_workflows  # pyright: ignore[reportPrivateUsage]
        adopted: list[str] = []
        if self._executor_slot is not None:
            adopted += await asyncio.to_thread(
                adopt_dead_executors, self._executor_dir, self._executor_slot.executor_id, recover
            )
        if self._liveness is not None:
            adopted += await asyncio.to_thread(self._liveness.adopt_dead, APPLICATION_VERSION, recover)
        if adopted:
            log.info("recovered the unfinished work of dead executors %s", ", ".join(sorted(set(adopted))))

    async def _watch_dead_executors(self, every: float) -> None:
        """A worker killed mid-turn has its turn resumed by a live one within `every`
        seconds, not only when a process starts."""
        while True:
            await asyncio.sleep(every)
            try:
                await self._adopt_dead_executors()
            except Exception as exc:  # the database may be briefly away; look again later
                log.warning("looking for dead executors failed: %s", exc)

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

    async def _outbox_woken(self, service: str, agent_id: str) -> int:
        """Another process announced a row (`runtime/delivery/bus.py`): flush it if it is for one of
        our agents on a channel connected here. A bus shared with strangers may announce
        anything; names we do not have cost nothing."""
        if agent_id not in self.agents or service not in self.channels:
            return 0
        return await self.outbox.flush(service, agent_id)

    async def stop(self, *, grace: float = 5.0) -> None:
        """Shut down. Workflows still running here get `grace` seconds to finish; the rest
        resume in the next process (`runtime/durable/_shutdown.py`)."""
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
        await self.live.close()
        self.workflows.dispatcher = None
        self.job_queue.close()
        self._worker = None
        if self._dbos_engine is not None:
            self._dbos_engine.dispose()  # DBOS does not dispose of an engine it was given
            self._dbos_engine = None
        self._queues.clear()
        if self._executor_slot is not None:  # only once DBOS no longer runs under it
            self._executor_slot.release()
            self._executor_slot = None
        if self._liveness is not None:
            await asyncio.to_thread(self._liveness.close)
            self._liveness = None
        for gateway in self.gateways.values():
            await gateway.aclose()
        await asyncio.to_thread(self.meter.close)
        await asyncio.to_thread(self.tracing.shutdown)  # flushes, bounded by the export timeout
        if self._prometheus is not None:
            self._prometheus.stop()
        await self.local_models.stop()
        await self.tools.stop()
        await self.store.close()

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # channels (runtime/api.py: what a channel may call) ---------------------------------
    def offline_notice(self) -> str | None:
        critique_off = any(self.activation.tiny_deliberator(agent_id) for agent_id in self.agents)
        notices = [self.local_models.notice(critique_off=critique_off), self.tools.notice()]
        return "\n".join(n for n in notices if n) or None

    async def attach_channel(self, channel: Channel) -> int:
        """Connect `channel` in this process; deliver what waited for it in the outbox
        (marked `while_away`). Returns how many messages that was."""
        self.channels[channel.service] = channel
        return await self.outbox.attach(channel, [a for a in self.agents if channel.serves(a)])

    def detach_channel(self, channel: Channel) -> None:
        if self.channels.get(channel.service) is channel:
            del self.channels[channel.service]

    def channel_states(self) -> list[ConnectionState]:
        return [
            state for _, channel in sorted(self.channels.items()) for state in channel.connection_states()
        ]

    async def deliver_pending(self, service: str) -> int:
        """Deliver now what the outbox holds for `service`, written by any process."""
        return sum([await self.outbox.flush(service, agent_id) for agent_id in self.agents])

    async def deliver_reply(self, agent_id: str, event_id: str, timeout: float = 5.0) -> bool:
        """The marker says the reply to `event_id` was transmitted, perhaps by another
        process: deliver its outbox row here if its channel is connected here. The SQLite
        store commits the row with the marker, so the first read finds it; the bounded wait
        is for a backend that writes it just after (`Store.record_reply`'s default). False
        if no row came (a reply on the agent's own surface has none)."""
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
            await asyncio.sleep(0.05)

    # people, for channels (which never reach into stores) -------------------------------
    async def resolve_speaker(self, agent_id: str, speaker: Speaker) -> tuple[str, str | None]:
        """The person id behind a speaker and the name they chose (`runtime.turn.speakers`)."""
        return await speakers.resolve_speaker(self.store, agent_id, speaker, self.clock.now())

    async def remember_display_name(self, agent_id: str, person_id: str, name: str) -> None:
        await speakers.remember_display_name(self.store, agent_id, person_id, name)

    async def knows_speaker(self, agent_id: str, speaker: Speaker) -> bool:
        return await speakers.knows_speaker(self.store, agent_id, speaker)

    async def revise_reply(self, agent_id: str, event_id: str, text: str) -> bool:
        """The reply's message is replaced under its own id (forgotten, then stored again with
        `text`): on a store without dialog history nothing can be rewritten."""
        history = capability(self.store, DialogHistoryPort)
        message = await self.store.agent_reply_for_event(agent_id, event_id)
        if history is None or message is None:
            return False
        await history.forget_messages(agent_id, [message.id])
        return await self.store.add_message(message.model_copy(update={"text": text}))

    # ingestion and dispatch (`runtime.durable.dispatch`) --------------------------------------------
    def validate_text(self, text: str | bytes) -> str:
        return self.intake.validate_text(text)

    async def keep_attachments(
        self, agent_id: str, service: str, channel: str, speaker_id: str | None, uploads: Sequence[Upload]
    ) -> tuple[Attachment, ...]:
        if agent_id not in self.agents:
            raise InputError(f"unknown agent id {agent_id!r}")
        files = await self.senses.fetched(uploads)
        now = self.clock.now()
        return await asyncio.to_thread(self.senses.keep, agent_id, service, channel, speaker_id, files, now)

    async def submit(self, event: Event, *, from_step: bool = False) -> str:
        if event.attachments:  # SPEC §4 step 1, once: the turn and a replay read the same words
            event = await self.senses.perceive(event)
        # Its tokens come back here if another process runs it (`runtime/delivery/bus.py`).
        event = self.live.taken_in(event, self.channels.get(event.service))
        return await self.intake.submit(event, from_step=from_step)

    async def get_event(self, agent_id: str, event_id: str) -> Event | None:
        return await self.store.get_event(agent_id, event_id)

    async def wait_marker(self, agent_id: str, event_id: str, timeout: float = 300.0) -> CompletionMarker:
        return await self.markers.wait(agent_id, event_id, timeout)

    # live calls (SPEC Appendix A, `runtime.turn.live`) ----------------------------------------
    async def open_live_call(self, event: Event) -> tuple[str, str]:
        return await self.live_voice.open_call(event)

    async def live_context(self, event: Event) -> str:
        return await self.live_voice.context(event)

    async def live_reply(
        self,
        event: Event,
        *,
        system: str,
        sink: Callable[[str], Awaitable[None]],
        cue: bool = False,
        notes: Sequence[str] = (),
    ) -> tuple[str | None, str]:
        return await self.live_voice.reply(event, system=system, sink=sink, cue=cue, notes=notes)

    async def hear(
        self,
        agent_id: str,
        transcriber: Transcriber,
        data: bytes,
        media_type: str,
        *,
        surface: str,
        channel: str,
    ) -> Transcript:
        with usage_context.rebind(agent_id=agent_id, surface=surface, channel=channel, trigger="voice"):
            return await self.gateways[agent_id].transcribe(transcriber, data, media_type)

    def spoke(self, agent_id: str, model: str, seconds: float, *, surface: str, channel: str) -> None:
        with usage_context.rebind(agent_id=agent_id, surface=surface, channel=channel, trigger="voice"):
            self.gateways[agent_id].meter_speech(model, seconds)

    # autonomy (SPEC §4.7) ---------------------------------------------------------------
    async def _start_autonomy(self) -> None:
        """Bootstrap each agent's heartbeat (once ever: a deleted one stays deleted), the timer
        armed to the next due reminder (`runtime/background/reminder_timer.py`) and the slow DBOS
        schedule that catches what it missed. A store without reminders has no heartbeat."""
        every = int(self.settings.autonomy.heartbeat_minutes * 60)
        schedule = capability(self.store, ScheduleStore)
        if schedule is not None:
            for agent in self.agents.values():
                await bootstrap_heartbeat(schedule, agent.id, every, self.clock.now())
        self.intake.open_for_steps(ClientDispatcher(await self._client()))
        config = self.settings.autonomy
        if not config.schedule:
            return
        if self.reminder_timer is not None:
            self._spawn(self.reminder_timer.run())
        if config.tick_seconds == 0:
            return
        tick = config.tick_seconds
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
