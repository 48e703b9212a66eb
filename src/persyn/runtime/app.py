"""The composition root: builds everything from config and runs activations.

`Runtime` owns the store, the meter, one model gateway per agent, the channel adapters
and the DBOS launch. Channels call `submit(event)`; workers run `workflows.activation`,
which calls back into `receive` / `respond` / `transmit` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions, Queue, SetEnqueueOptions, SetWorkflowID
from sqlalchemy import Engine

from persyn.channels.base import Channel
from persyn.cognition import deliberation, pipeline, reflection
from persyn.cognition.context import GRAPH_FAILURE_FLAG, GraphSource, MemorySource, PeopleSource, recalled_ids
from persyn.cognition.goals import GoalsSource
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.core.clock import Clock, SystemClock
from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import InputError, ModelError
from persyn.core.events import CompletionMarker, Event, Speaker
from persyn.core.ids import derived_id, parse_id
from persyn.core.records import channel_key
from persyn.gateway.base import Prompt, SinkEvent, ToolCall, ToolSpec
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.local import OFFLINE_NOTICE, LlamaServer, resolve_weights
from persyn.gateway.registry import ModelSpec, parse_model_string
from persyn.graph.extract import GraphExtractor
from persyn.memory.consolidate import CONSOLIDATED_FLAG, IMPORTED_KIND, Consolidator, default_sensitivity
from persyn.memory.embedder import Embedder, embedder_from_config
from persyn.memory.retrieval import Retriever
from persyn.people.observations import Dossiers, Observer
from persyn.runtime import workflows
from persyn.runtime._dbos_sqlite import dbos_sqlite_engine
from persyn.runtime._dbos_wake import QueueWaker, install_queue_waker
from persyn.runtime._executor import ExecutorSlot, adopt_dead_executors, claim_executor_slot
from persyn.runtime.agent_tools import build_registry
from persyn.runtime.autonomy import (
    RUN_FLAG,
    Autonomy,
    BudgetedGateway,
    run_kind,
    run_sensitivity,
    set_run_provenance,
)
from persyn.runtime.memory_ops import context_window_for
from persyn.runtime.outbox import Outbox, reply_key
from persyn.runtime.outreach import Outreach
from persyn.runtime.transmit import Transmitter
from persyn.schedule import bootstrap_heartbeat
from persyn.store import Store, open_store
from persyn.store.base import Conversation, Identity, Message, Role
from persyn.tools.registry import ToolRegistry
from persyn.usage import context as usage_context
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.meter import Meter, MeterAdapter
from persyn.usage.prometheus import PrometheusAdapter

__all__ = ["AUTO_SPEAK", "DELIBERATION_FLAG", "DISPLAY_NAME_PREF", "ConversationHook", "Runtime"]

DISPLAY_NAME_PREF = "display_name"
DELIBERATION_FLAG = "deliberation:"
AUTO_SPEAK = workflows.AUTO_SPEAK

_EVENT_CACHE_SIZE = 4096
_MARKER_POLL_MAX = 0.1  # seconds between store reads while waiting for a marker

log = logging.getLogger(__name__)

ConversationHook = Callable[[str, str], Awaitable[None]]


class Runtime:
    """One process's view of a deployment: every configured agent, shared infrastructure."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        extra_meter_adapters: list[MeterAdapter] | None = None,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.store: Store = store or open_store(settings.database_url)
        adapters: list[MeterAdapter] = []
        if settings.metering.event_log:
            adapters.append(JsonlAdapter(settings.usage_log_path))
        self._prometheus: PrometheusAdapter | None = None
        if settings.metering.prometheus_port:
            self._prometheus = PrometheusAdapter()
            adapters.append(self._prometheus)
        adapters.extend(extra_meter_adapters or [])
        self.meter = Meter(adapters)
        self.autonomy = Autonomy(self)
        self.agents: dict[str, AgentConfig] = {a.id: a for a in settings.agents}
        self.channels: dict[str, Channel] = {}
        self.context_sources: list[ContextSource] = []
        self._hooks: dict[str, ConversationHook] = {}
        self._extractions: dict[str, ConversationHook] = {}
        self._tool_specs: tuple[ToolSpec, ...] | None = None
        self._unextracted: dict[str, int] = {}  # messages since the last extraction trigger
        self._gateways: dict[str, ModelGateway] = {}
        self._local_servers: dict[str, LlamaServer] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._marker_waiters: dict[str, asyncio.Event] = {}
        self._put_markers: dict[str, CompletionMarker] = {}  # markers put here, for waiters here
        self.embedder: Embedder | None = None
        self.retriever: Retriever | None = None
        self.memory_degraded: str | None = None
        self._launched = False
        self._client: DBOSClient | None = None
        self._scheduler_client: DBOSClient | None = None
        self._dbos_engine: Engine | None = None
        self._executor_slot: ExecutorSlot | None = None
        self._waker: QueueWaker | None = None
        self._queues: dict[str, Queue] = {}  # as registered at start (reading one back costs a query)
        self.running_activations = 0  # in this process, for the wake's batching
        self._events: dict[str, Event] = {}  # events of activations in flight, by id
        self._dialogs: dict[str, list[Message]] = {}  # their dialog (input last), by event id
        self._transmitting: set[str] = set()  # events whose transmit runs in this process now
        self.uses_offline_model = False
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

    # lifecycle -------------------------------------------------------------------------
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
        await self._start_local_models()
        self._spawn(
            self.outbox.run(
                lambda: list(self.channels), list(self.agents), self.settings.dispatch.outbox_poll_seconds
            )
        )
        for agent in self.agents.values():
            self._gateways[agent.id] = BudgetedGateway(
                self.settings,
                agent,
                self.meter,
                local_factory=self._local_model,
                clock=self.clock,
                autonomy=self.autonomy,
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
        workflows.install(self)
        dbos_url = self.settings.dbos_database_url
        self._dbos_engine = dbos_sqlite_engine(dbos_url)
        config: DBOSConfig = {
            "name": "persyn",
            "system_database_url": dbos_url,
            "log_level": self.settings.log_level.upper(),
        }
        if self._dbos_engine is not None:
            config["system_database_engine"] = self._dbos_engine
        if workers:
            config["executor_id"] = self._executor_id(role or ("run" if scheduler else "worker"))
            DBOS(config=config)
            # Launched from inside the running loop so queued workflows run on it: live
            # token sinks and adapters then need no cross-thread marshalling.
            DBOS.launch()
            if self._executor_slot is not None:
                adopted = await asyncio.to_thread(
                    adopt_dead_executors,
                    self._executor_dir,
                    self._executor_slot.executor_id,
                    DBOS._recover_pending_workflows,  # pyright: ignore[reportPrivateUsage]
                )
                if adopted:
                    log.info("recovered the unfinished work of dead executors %s", ", ".join(adopted))
            # Enqueues from this process wake the queue's worker at once; polling remains
            # for work other processes enqueue.
            self._waker = install_queue_waker()
        else:
            # A process that only submits (`persyn send`) enqueues for the workers through
            # the system database, without becoming an executor itself.
            # It may run before any worker ever started, so it makes sure the system
            # database exists (idempotent).
            await asyncio.to_thread(DBOS.migrate, self.settings.dbos_database_url)
            self._client = await asyncio.to_thread(
                DBOSClient, system_database_url=dbos_url, system_database_engine=self._dbos_engine
            )
        self._launched = workers
        polling = self.settings.dispatch.queue_polling_seconds
        if workers:
            # partition_concurrency=1 over partition key agent_id *is* the per-agent lock
            # (SPEC §7), across processes and hosts sharing the system database.
            self._queues[workflows.EVENTS_QUEUE] = await DBOS.register_queue_async(
                workflows.EVENTS_QUEUE,
                partition_concurrency=1,
                worker_concurrency=self.settings.dispatch.worker_concurrency,
                polling_interval_sec=polling,
            )
            self._queues[workflows.BACKGROUND_QUEUE] = await DBOS.register_queue_async(
                workflows.BACKGROUND_QUEUE,
                worker_concurrency=max(1, self.settings.dispatch.worker_concurrency // 4),
                polling_interval_sec=max(polling * 2, 0.5),
            )
            if scheduler:
                self._spawn(self._housekeeping())
                await self._start_autonomy()

    @property
    def _executor_dir(self) -> Path:
        return self.settings.data_dir / "executors"

    def _executor_id(self, role: str) -> str:
        """`[dispatch] executor_id` (or DBOS's own `DBOS__VMID`) when set — the operator
        keeps it unique per process — or a slot of `role` held for the life of this runtime."""
        explicit = self.settings.dispatch.executor_id or os.environ.get("DBOS__VMID")
        if explicit:
            return explicit
        if self._executor_slot is None:
            self._executor_slot = claim_executor_slot(self._executor_dir, role)
        return self._executor_slot.executor_id

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._launched:
            # DBOS.destroy blocks this loop, where DBOS runs our async workflows: let them
            # finish first (a transmitted reply's workflow still records its outcome), or they
            # wake after the destroy and fail. Unfinished ones resume on the next start (DBOS
            # recovery), so nothing accepted is lost either way.
            await _drain_workflows(timeout=5.0)
            DBOS.destroy(workflow_completion_timeout_sec=5)
            # DBOS made its (now shut down) pool this loop's default executor at launch.
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(thread_name_prefix="persyn"))
        for client in (self._client, self._scheduler_client):
            if client is not None:
                client.destroy()
        self._client = self._scheduler_client = None
        if self._dbos_engine is not None:
            self._dbos_engine.dispose()  # DBOS does not dispose of an engine it was given
            self._dbos_engine = None
        self._waker = None
        self._queues.clear()
        if self._executor_slot is not None:  # only once DBOS no longer runs under it
            self._executor_slot.release()
            self._executor_slot = None
        workflows.install(None)
        for gateway in self._gateways.values():
            await gateway.aclose()
        await asyncio.to_thread(self.meter.close)
        if self._prometheus is not None:
            self._prometheus.stop()
        for server in self._local_servers.values():
            await asyncio.to_thread(server.stop)
        await self.store.close()

    # memory ----------------------------------------------------------------------------
    def _start_memory(self) -> None:
        """The encoder, retrieval as a context source, and consolidation after each
        conversation. An unavailable encoder degrades to keyword recall (SPEC §6)."""
        try:
            self.embedder = embedder_from_config(self.settings.memory)
        except Exception as exc:
            self.embedder = None
            self.memory_degraded = f"encoder {self.settings.memory.embedder!r} unavailable: {exc}"
            log.warning("%s; memory falls back to keyword recall", self.memory_degraded)
        self.retriever = Retriever(self.store, self.embedder, self.settings.memory)
        self.context_sources.append(
            MemorySource(
                self.store, self.retriever, self.clock, self.memory_budget, on_read=self.autonomy.noticed
            )
        )
        self.add_conversation_hook("consolidate", self.consolidate_conversation)
        # People (SPEC §4.4): observations after each conversation, dossiers in context.
        self.add_conversation_hook("observe", self.observe_conversation)
        self.add_extraction("observe", self.observe_so_far)
        self.context_sources.append(PeopleSource(self.store, self.dossiers, self.settings.memory))

    def dossiers(self, agent_id: str) -> Dossiers:
        return Dossiers(self.store, self.gateway(agent_id), self.agents[agent_id].name)

    async def observe_conversation(self, agent_id: str, conversation_id: str, *, closed: bool = True) -> None:
        """Extract and reconcile observations about who spoke (what is new since the last
        reading: the rest once closed, so far while open), then refresh their dossiers (off
        the critical path: a turn only ever reads a cached dossier)."""
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        agent = self.agents.get(agent_id)
        if conversation is None or agent is None or (closed and conversation.closed_at is None):
            return
        observer = Observer(self.store, self.gateway(agent_id), agent.name)
        done = await observer.observe(agent_id, conversation)
        if not done:
            return
        dossiers = self.dossiers(agent_id)
        for person_id in conversation.participant_ids:
            person = await self.store.get_person(agent_id, person_id)
            if person is None:
                continue
            try:
                await dossiers.dossier(agent_id, person_id, person.display_name, self.clock.now())
            except ModelError as exc:  # the stale dossier is simply not shown
                log.warning("dossier of %s not refreshed: %s", person_id, exc)

    # knowledge graph ---------------------------------------------------------------------
    def _start_graph(self) -> None:
        """Graph context per turn and extraction after each conversation (SPEC §4.3);
        `[graph] enabled = false` leaves both out."""
        if not self.settings.graph.enabled:
            return
        self.context_sources.append(
            GraphSource(
                self.store,
                self.settings.graph,
                self.settings.memory.channel_groups,
                self.clock,
                self.graph_budget,
                on_read=self.autonomy.noticed,
            )
        )
        self.add_conversation_hook("graph", self.graph_conversation)
        self.add_extraction("graph", self.graph_so_far)

    async def graph_so_far(self, agent_id: str, conversation_id: str) -> None:
        await self.graph_conversation(agent_id, conversation_id, closed=False)

    def graph_budget(self, agent_id: str) -> int:
        agent = self.agents[agent_id]
        return int(context_window_for(self.settings, agent) * self.settings.graph.budget_fraction)

    async def graph_conversation(self, agent_id: str, conversation_id: str, *, closed: bool = True) -> None:
        """Extract what is new in a conversation (the rest of it once closed; so far while
        open) into the graph. A failure is logged and flagged for `persyn doctor`; what was
        not read is read on the next run."""
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        agent = self.agents.get(agent_id)
        if conversation is None or agent is None or (closed and conversation.closed_at is None):
            return
        extractor = GraphExtractor(self.store, self.gateway(agent_id), agent.name)
        default = default_sensitivity(self.settings.memory, conversation.service)
        try:
            outcome = await extractor.extract(agent_id, conversation, default)
        except Exception as exc:  # fail soft: the graph is optional (SPEC §2)
            log.warning("graph extraction of %s failed: %s", conversation_id, exc)
            outcome_failure = f"{type(exc).__name__}: {exc}"
        else:
            outcome_failure = outcome.failure
            if outcome.dropped:
                log.info(
                    "graph extraction of %s dropped %d items: %s",
                    conversation_id,
                    len(outcome.dropped),
                    outcome.dropped[:3],
                )
        with contextlib.suppress(Exception):
            if outcome_failure:
                flag = json.dumps(
                    {"at": self.clock.now().isoformat(), "error": f"extraction: {outcome_failure}"}
                )
                await self.store.set_flag(agent_id, GRAPH_FAILURE_FLAG, flag)
            elif await self.store.get_flag(agent_id, GRAPH_FAILURE_FLAG) is not None:
                await self.store.set_flag(agent_id, GRAPH_FAILURE_FLAG, None)  # working again

    async def observe_so_far(self, agent_id: str, conversation_id: str) -> None:
        await self.observe_conversation(agent_id, conversation_id, closed=False)

    def memory_budget(self, agent_id: str) -> int:
        agent = self.agents[agent_id]
        return int(context_window_for(self.settings, agent) * self.settings.memory.budget_fraction)

    async def consolidate_conversation(self, agent_id: str, conversation_id: str) -> None:
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        if conversation is None or conversation.closed_at is None:
            return
        agent = self.agents.get(agent_id)
        if agent is None:
            return
        consolidator = Consolidator(
            self.store, self.gateway(agent_id), self.embedder, self.settings.memory, agent.name
        )
        recalled = await recalled_ids(self.store, agent_id, conversation_id)
        run = run_kind(await self.store.get_flag(agent_id, RUN_FLAG + conversation_id))
        tags: tuple[str, ...] = ()
        kind = "conversation"
        if run.get("reminder_id") and run.get("kind") == "reminder":
            tags, kind = ("reminder", f"reminder-{run['reminder_id']}"), "reminder"
        elif run.get("kind") == "heartbeat":
            tags, kind = ("heartbeat",), "reflection"
        # A self-initiated run's memory is at least as sensitive as what the run read.
        floor = run_sensitivity(run)
        try:
            result = await consolidator.consolidate(
                agent_id, conversation, recalled, extra_tags=tags, kind=kind, floor=floor
            )
        except ModelError as exc:
            # Degrade: the dialog is kept, and the conversation can be consolidated later.
            log.warning("consolidation of %s failed: %s", conversation_id, exc)
            return
        await self.store.set_flag(agent_id, CONSOLIDATED_FLAG + conversation_id, result.skipped or "stored")

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # models ----------------------------------------------------------------------------
    def gateway(self, agent_id: str) -> ModelGateway:
        return self._gateways[agent_id]

    async def _start_local_models(self) -> None:
        """Start llama.cpp for every distinct `local:` weights file some task is bound to.

        Done up front (and off the event loop) so the first reply does not stall."""
        for agent in self.agents.values():
            for task in Task:
                spec = parse_model_string(self.settings.model_for(agent, task), self.settings.secrets)
                if spec.provider != "local" or spec.name in self._local_servers:
                    continue
                weights = await asyncio.to_thread(resolve_weights, spec.name, self.settings.models_dir)
                server = LlamaServer(
                    weights,
                    context_window=self.settings.models.context_window or 4096,
                    log_path=self.settings.home / "logs" / "llama-server.log",
                )
                (self.settings.home / "logs").mkdir(parents=True, exist_ok=True)
                await server.start_async()
                self._local_servers[spec.name] = server
                self.uses_offline_model = True

    def _local_model(self, spec: ModelSpec) -> Any:
        from persyn.gateway.openai import build_openai_model

        server = self._local_servers.get(spec.name)
        if server is None:
            raise ModelError(f"the local model {spec.name or 'default'!r} was not started")
        return build_openai_model(
            server.model_name, server.base_url, None, self.settings.models.request_timeout_seconds
        )

    def offline_notice(self) -> str | None:
        if not self.uses_offline_model:
            return None
        if any(self.tiny_deliberator(agent_id) for agent_id in self.agents):
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
            await asyncio.sleep(_MARKER_POLL_MAX / 2)

    async def _run_stopped(self, event: Event) -> str | None:
        return (await self.autonomy.spent(event)).stopped

    # people, for channels (which never reach into stores) -------------------------------
    async def resolve_speaker(self, agent_id: str, speaker: Speaker) -> tuple[str, str | None]:
        """The person id behind a speaker (created on first contact) and the display name
        they chose earlier, if any (SPEC App. B)."""
        identity = Identity(service=speaker.service, channel=speaker.channel, speaker_id=speaker.speaker_id)
        person = await self.store.resolve_person(
            agent_id, identity, speaker.display_name, speaker.kind, self.clock.now()
        )
        chosen = await self.store.get_preference(agent_id, person.id, DISPLAY_NAME_PREF)
        return person.id, chosen

    async def remember_display_name(self, agent_id: str, person_id: str, name: str) -> None:
        await self.store.set_preference(agent_id, person_id, DISPLAY_NAME_PREF, name)
        await self.store.rename_person(agent_id, person_id, name)

    # ingestion -------------------------------------------------------------------------
    def validate_text(self, text: str | bytes) -> str:
        """Reject what must not enter the pipeline; nothing is stored for rejected input."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"message is not valid UTF-8 (bad byte at position {exc.start})") from exc
        limit = self.settings.conversation.max_message_chars
        if len(text) > limit:
            raise InputError(
                f"message is {len(text)} characters long; the limit is {limit} "
                "([conversation] max_message_chars)"
            )
        if "\x00" in text:
            raise InputError("message contains a NUL character")
        if not text.strip():
            raise InputError("message is empty")
        return text

    async def submit(self, event: Event, *, from_step: bool = False) -> str:
        """Persist the event, then enqueue its activation (dedup by event id). From inside a
        durable step (the scheduler's), the enqueue goes through a DBOS client: a step may
        not start workflows itself, and the event id keeps it exactly-once either way."""
        parse_id(event.id, what="event id")
        if event.agent_id not in self.agents:
            raise InputError(f"unknown agent id {event.agent_id!r}")
        self.validate_text(event.text)
        await self.store.save_event(event)
        if not from_step:  # the activation will most likely run here: it need not read it back
            self._remember_event(event)
        await self._enqueue_activation(
            event.agent_id, event.id, client=self._scheduler_client if from_step else None
        )
        return event.id

    async def _enqueue_activation(
        self, agent_id: str, event_id: str, client: DBOSClient | None = None
    ) -> None:
        client = client or self._client
        if client is not None:
            options: EnqueueOptions = {
                "workflow_name": "persyn.activation",
                "queue_name": workflows.EVENTS_QUEUE,
                "workflow_id": event_id,
                "queue_partition_key": agent_id,
            }
            await client.enqueue_async(options, agent_id, event_id)
        else:
            queue = self.queue(workflows.EVENTS_QUEUE)
            with SetWorkflowID(event_id), SetEnqueueOptions(queue_partition_key=agent_id):
                await queue.enqueue_async(workflows.activation, agent_id, event_id)
        self.wake_queue(workflows.EVENTS_QUEUE)

    def queue(self, name: str) -> Queue:
        """A queue this process registered (as a worker) at start."""
        queue = self._queues.get(name)
        if queue is None:
            raise RuntimeError(f"the queue {name!r} is not registered; start the runtime with workers")
        return queue

    def wake_queue(self, queue_name: str) -> None:
        """Work was just enqueued (committed) on `queue_name`: if this process runs its
        worker, let it look now rather than at its next poll."""
        if self._waker is not None:
            busy = queue_name == workflows.EVENTS_QUEUE and self.running_activations > 0
            self._waker.wake(queue_name, busy=busy)

    async def wait_marker(self, agent_id: str, event_id: str, timeout: float = 300.0) -> CompletionMarker:
        """Wait for the completion marker (SPEC App. B) until the run ends. A marker put by
        this process wakes the waiter at once, and is handed over without reading it back;
        one put by another worker is found by polling the store. A process with workers
        most likely runs the event itself, so it polls every 0.1 s (polling sooner would
        take CPU from the very turn it waits for: a store read each time); a process that
        only submits starts at 5 ms and backs off to 0.1 s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = _MARKER_POLL_MAX if self._launched else 0.005
        waiter = self._marker_waiters.setdefault(event_id, asyncio.Event())
        try:
            while True:
                # While this process transmits the event, its marker is committed with the
                # reply, before the surface is given it: wait for the wake at the end of
                # transmit, so the waiter never returns ahead of the delivery.
                if event_id not in self._transmitting:
                    marker = self._put_markers.pop(event_id, None) or await self.store.get_marker(
                        agent_id, event_id, self.clock.now()
                    )
                    if marker is not None:
                        return marker
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"no completion for event {event_id} within {timeout:.0f}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), min(delay, remaining))
                delay = min(delay * 2, _MARKER_POLL_MAX)
        finally:
            self._marker_waiters.pop(event_id, None)
            self._put_markers.pop(event_id, None)

    def _marker_put(self, marker: CompletionMarker) -> None:
        """A marker is stored (committed): a waiter in this process may take it as is."""
        if marker.event_id in self._marker_waiters:
            self._put_markers[marker.event_id] = marker

    def _wake(self, event_id: str) -> None:
        waiter = self._marker_waiters.get(event_id)
        if waiter is not None:
            waiter.set()

    # pipeline steps (called from durable workflow steps) ---------------------------------
    async def _event(self, agent_id: str, event_id: str) -> Event:
        """The stored event. Events never change once saved, so each is read once per
        activation (receive; or handed over by `submit` in this process), kept for its respond
        and transmit, and dropped after."""
        event = self._events.get(event_id)
        if event is not None and event.agent_id == agent_id:
            return event
        event = await self.store.get_event(agent_id, event_id)
        if event is None:
            raise InputError(f"event {event_id!r} of agent {agent_id!r} is not stored")
        self._remember_event(event)
        return event

    def known_event(self, event_id: str) -> Event | None:
        """The event of an activation in flight here, if it is at hand (never a read)."""
        return self._events.get(event_id)

    def _remember_event(self, event: Event) -> None:
        if len(self._events) >= _EVENT_CACHE_SIZE:  # activations that never reached transmit
            self._events.pop(next(iter(self._events)))
        self._events[event.id] = event

    async def receive(self, agent_id: str, event_id: str) -> dict[str, Any]:
        event = await self._event(agent_id, event_id)
        agent = self.agents[agent_id]
        setup = await pipeline.receive(self.store, self.settings, event, self.clock.now(), agent.name)
        setup = setup.model_copy(update={"mode": self.deliberation_mode(event.service)})
        return setup.model_dump(mode="json")

    async def receive_and_respond(self, agent_id: str, event_id: str) -> dict[str, Any]:
        """`receive`, then `respond` when the message is for the agent (`draft` None
        otherwise)."""
        setup = await self.receive(agent_id, event_id)
        # Overheard traffic needs an engagement decision first; a heartbeat, its
        # self-assessment (its own step): no draft here for either.
        if not setup["addressed"] or setup.get("kind") == "heartbeat":
            return {"setup": setup, "draft": None}
        with usage_context.rebind(
            surface=setup["service"], channel=setup["channel"], conversation_id=setup["conversation_id"]
        ):
            draft = await self.respond(agent_id, event_id, setup)
        return {"setup": setup, "draft": draft}

    def deliberation_mode(self, service: str) -> str:
        """Per-service override, else deferred on interactive channels, inline elsewhere."""
        config = self.settings.deliberation
        if service in config.channels:
            return config.channels[service]
        if config.mode != "auto":
            return config.mode
        channel = self.channels.get(service)
        return "deferred" if channel is not None and channel.interactive else "inline"

    def should_critique(self, text: str, agent_id: str | None = None) -> bool:
        config = self.settings.deliberation
        if not config.enabled or (agent_id is not None and self.tiny_deliberator(agent_id)):
            return False
        return deliberation.is_substantive(text, config.substantive_min_words)

    def tiny_deliberator(self, agent_id: str) -> bool:
        """Whether critique would run on the built-in tiny offline model, where it costs
        seconds per turn on one shared llama.cpp server and its objections are noise; then
        deliberation is skipped unless `[deliberation] offline_model = true`."""
        if self.settings.deliberation.offline_model:
            return False
        gateway = self._gateways.get(agent_id)
        if gateway is None:
            return False
        spec = gateway.spec_for(Task.CRITIQUE)
        return spec.provider == "local" and not spec.name

    async def _turn_dialog(self, setup: TurnSetup) -> list[Message]:
        """The current conversation's recent dialog as this turn sees it, its input last
        (`pipeline.read_turn_dialog`). Read once per activation in this process: the prompt,
        both critics, the decision, the engagement decision and the redundancy gate all judge
        the same dialog (what came before the input does not change); dropped at transmit."""
        cached = self._dialogs.get(setup.event_id)
        if cached is not None:
            return cached
        dialog = await pipeline.read_turn_dialog(self.store, self.settings, setup)
        if len(self._dialogs) >= _EVENT_CACHE_SIZE:  # activations that never reached transmit
            self._dialogs.pop(next(iter(self._dialogs)))
        self._dialogs[setup.event_id] = dialog
        return dialog

    async def engage(self, agent_id: str, event_id: str, setup_data: dict[str, Any]) -> dict[str, Any]:
        setup = TurnSetup.model_validate(setup_data)
        over = await self._reply_budget_spent(setup)
        if over is not None:  # no model call for a channel that gets no replies now
            return deliberation.Decision(action="silent", reason=over).model_dump(mode="json")
        dialog = await self._turn_dialog(setup)
        decision = await deliberation.engage(self.gateway(agent_id), self.agents[agent_id], dialog)
        return decision.model_dump(mode="json")

    async def respond(self, agent_id: str, event_id: str, setup_data: dict[str, Any]) -> dict[str, Any]:
        setup = TurnSetup.model_validate(setup_data)
        over = await self._reply_budget_spent(setup)
        if over is not None:  # nothing is generated; transmit records why
            reply = pipeline.Reply(text=None, failure=over)
            return {"reply": reply.model_dump(mode="json"), "prepared": None, "budget": over}
        event = await self._event(agent_id, event_id)
        agent = self.agents[agent_id]
        prepared = await pipeline.build_prompt(
            self.store,
            self.settings,
            agent,
            setup,
            self.clock.now(),
            event.text,
            self.context_sources,
            read_dialog=lambda: self._turn_dialog(setup),
        )
        channel = self.channels.get(event.service)
        sink = _safe_sink_for(channel, event)
        tools = self.tool_specs(setup, event_id) if self.offers_tools(agent_id) else ()
        reply = await pipeline.respond(self.gateway(agent_id), prepared.prompt, sink, tools)
        return {"reply": reply.model_dump(mode="json"), "prepared": prepared.model_dump(mode="json")}

    # the tool loop (SPEC §4.6): each round-trip and each tool call is its own durable step ----
    def offers_tools(self, agent_id: str) -> bool:
        """Tools go to the respond model unless disabled, or it is the built-in tiny model."""
        if not self.settings.tools.enabled:
            return False
        gateway = self._gateways.get(agent_id)
        spec = gateway.spec_for(Task.RESPOND) if gateway is not None else None
        return not (spec is not None and spec.provider == "local" and not spec.name)

    def tool_registry(self, setup: TurnSetup, event_id: str, call_key: str | None = None) -> ToolRegistry:
        """The tools of one activation; `call_key` names the one tool call they serve (see
        `run_tool`)."""
        return build_registry(self, setup, event_id, call_key)

    def tool_specs(self, setup: TurnSetup, event_id: str) -> tuple[ToolSpec, ...]:
        """What the model is offered: the same for every turn and every agent of the
        deployment (`[tools]` is deployment-wide; a tool's behaviour is bound per activation,
        its name, description and schema are not), so built once (building the registry
        generates every tool's schemas: milliseconds)."""
        if self._tool_specs is None:
            self._tool_specs = self.tool_registry(setup, event_id).specs()
        return self._tool_specs

    async def continue_respond(
        self, agent_id: str, event_id: str, setup_data: dict[str, Any], prompt_data: dict[str, Any]
    ) -> dict[str, Any]:
        """One more round-trip of the tool loop: the prompt with the tool results so far. A
        failing model ends the loop with what was said so far (the caller's fallback)."""
        setup = TurnSetup.model_validate(setup_data)
        event = await self._event(agent_id, event_id)
        prompt = Prompt.model_validate(prompt_data)
        sink = _safe_sink_for(self.channels.get(event.service), event)
        tools = self.tool_specs(setup, event_id)
        try:
            completion = await self.gateway(agent_id).complete(
                Task.RESPOND, prompt, tools=tools, sink=sink, phase="draft"
            )
        except ModelError as exc:
            log.warning("a tool-loop round-trip failed: %s", exc)
            return {"text": "", "tool_calls": [], "failure": str(exc)}
        return {
            "text": completion.text,
            "tool_calls": [call.model_dump(mode="json") for call in completion.tool_calls],
            "usage_id": completion.usage_id,
        }

    async def run_tool(
        self,
        agent_id: str,
        event_id: str,
        setup_data: dict[str, Any],
        call_data: dict[str, Any],
        *,
        call_key: str | None = None,
    ) -> dict[str, Any]:
        """One tool call; any failure comes back as an error result the model reads.
        `call_key` identifies the call across re-runs of its durable step (the step's
        workflow and position, never what the model put in it): what it sends counts once."""
        setup = TurnSetup.model_validate(setup_data)
        event = await self._event(agent_id, event_id)
        channel = self.channels.get(event.service)
        call = ToolCall.model_validate(call_data)
        sink = _safe_sink_for(channel, event)
        if sink is not None:
            sink(SinkEvent(phase="draft", kind="tool_start", text=call.name))
        outcome = await self.tool_registry(setup, event_id, call_key).call(call)
        return outcome.model_dump(mode="json")

    async def critique(
        self, agent_id: str, event_id: str, setup_data: dict[str, Any], draft: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Provenance plus one drawn lens, concurrently; each metered as its own stage."""
        setup = TurnSetup.model_validate(setup_data)
        prepared = pipeline.Prepared.model_validate(draft["prepared"])
        text = str(draft["reply"]["text"])
        lenses = [deliberation.PROVENANCE, deliberation.draw_lens(self.settings.deliberation, event_id)]
        dialog = await self._turn_dialog(setup)
        agent = self.agents[agent_id]
        gateway = self.gateway(agent_id)
        step_key = usage_context.current().step_key

        async def one(lens: str) -> deliberation.CritiqueOutcome:
            # Own usage-id sequence per critic: concurrent rounds must not interleave ids.
            with usage_context.rebind(step_key=f"{step_key}:{lens}" if step_key else None):
                return await deliberation.critique(
                    gateway, lens, agent, prepared.evidence_items(), dialog, text
                )

        outcomes = await asyncio.gather(*(one(lens) for lens in lenses))
        return [outcome.model_dump(mode="json") for outcome in outcomes]

    async def refine(
        self,
        agent_id: str,
        event_id: str,
        draft: dict[str, Any],
        critiques: list[dict[str, Any]],
        *,
        live: bool = True,
    ) -> str | None:
        prepared = pipeline.Prepared.model_validate(draft["prepared"])
        objections = [
            objection
            for outcome in critiques
            for objection in deliberation.CritiqueOutcome.model_validate(outcome).objections
        ]
        sink = None
        if live:
            event = await self._event(agent_id, event_id)
            sink = _safe_sink_for(self.channels.get(event.service), event)
        return await deliberation.refine(
            self.gateway(agent_id), prepared.prompt, str(draft["reply"]["text"]), objections, sink
        )

    def needs_decision(self, setup_data: dict[str, Any], text: str) -> bool:
        """Whether the decision to speak needs a model: always for overheard traffic and
        for substantive replies; a short, plain answer to someone talking to the agent is
        sent on the deterministic gates alone (they still run in transmit)."""
        if not setup_data.get("addressed", True):
            return True
        if self.tiny_deliberator(str(setup_data["agent_id"])):
            return False
        return deliberation.is_substantive(text, self.settings.deliberation.substantive_min_words)

    async def decide(
        self, agent_id: str, event_id: str, setup_data: dict[str, Any], text: str
    ) -> dict[str, Any]:
        """The model's decision with its stated reason (SPEC §4 step 6)."""
        setup = TurnSetup.model_validate(setup_data)
        dialog = await self._turn_dialog(setup)
        decision = await deliberation.decide(
            self.gateway(agent_id), self.agents[agent_id], dialog, text, addressed=setup.addressed
        )
        return decision.model_dump(mode="json")

    async def _gate(self, setup: TurnSetup, text: str) -> deliberation.Decision | None:
        """Hard gates before anything is sent (`Transmitter.gate`)."""
        return await self.transmitter.gate(setup, text)

    async def park(
        self,
        agent_id: str,
        event_id: str,
        setup_data: dict[str, Any],
        draft: dict[str, Any],
        critiques: list[dict[str, Any]],
        revised: str | None,
    ) -> None:
        """Keep a deferred conclusion for the next turn (only if there is something to fix)."""
        setup = TurnSetup.model_validate(setup_data)
        outcomes = [deliberation.CritiqueOutcome.model_validate(c) for c in critiques]
        objections = [o for outcome in outcomes for o in outcome.objections]
        await self._record_deliberation(agent_id, event_id, {"mode": "deferred", "critiques": critiques})
        if objections:
            parked = deliberation.Parked(
                event_id=event_id, draft=str(draft["reply"]["text"]), revised=revised, objections=objections
            )
            await pipeline.park(self.store, setup, parked, self.clock.now())
        event = await self._event(agent_id, event_id)
        channel = self.channels.get(event.service)
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.deliberation_done(event, len(objections))

    async def _record_deliberation(self, agent_id: str, event_id: str, trace: dict[str, Any]) -> None:
        """What deliberation did for an event (critics, skips, decision): `persyn
        conversations show --deliberation` reads it."""

        def merge(previous: str | None) -> str:
            merged: dict[str, Any] = json.loads(previous) if previous else {}
            merged.update(trace)
            return json.dumps(merged)

        await self.store.update_flag(agent_id, DELIBERATION_FLAG + event_id, merge)

    async def transmit(
        self, agent_id: str, event_id: str, setup_data: dict[str, Any], outcome: dict[str, Any]
    ) -> dict[str, Any]:
        """Act on the decision: speak (or decline, in words), redirect, or stay silent.

        Exactly one completion marker per event, whatever happened (SPEC App. B). A waiter
        in this process is woken once the surface has been given the outcome."""
        self._transmitting.add(event_id)
        try:
            return await self._transmit(agent_id, event_id, setup_data, outcome)
        finally:
            self._transmitting.discard(event_id)
            self._dialogs.pop(event_id, None)
            self._wake(event_id)

    async def _transmit(
        self, agent_id: str, event_id: str, setup_data: dict[str, Any], outcome: dict[str, Any]
    ) -> dict[str, Any]:
        setup = TurnSetup.model_validate(setup_data)
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
        self._scheduler_client = await asyncio.to_thread(
            DBOSClient,
            system_database_url=self.settings.dbos_database_url,
            system_database_engine=self._dbos_engine,
        )
        if not self.settings.autonomy.schedule:
            return
        tick = self.settings.autonomy.tick_seconds
        await DBOS.apply_schedules_async(
            [
                {
                    "schedule_name": "persyn-reminders",
                    "workflow_fn": workflows.scheduler_tick,
                    "schedule": f"*/{tick} * * * * *",
                    "queue_name": workflows.BACKGROUND_QUEUE,
                }
            ]
        )

    async def busy(self, agent_id: str) -> bool:
        """Whether an activation of the agent is queued or running (any process)."""
        active = await DBOS.list_queued_workflows_async(
            queue_name=workflows.EVENTS_QUEUE,
            status=["ENQUEUED", "PENDING"],
            load_input=False,
            load_output=False,
        )
        return any(w.queue_partition_key == agent_id for w in active)

    async def assess(self, agent_id: str, event_id: str, setup_data: dict[str, Any]) -> dict[str, Any]:
        """The heartbeat's self-assessment, kept in the run's conversation as what the agent
        thought (so the respond step that acts on it sees it in the dialog)."""
        setup = TurnSetup.model_validate(setup_data)
        agent = self.agents[agent_id]
        config = self.settings.autonomy
        # Only what may come to mind with nobody present; what the beat writes from here on
        # may surface at most where that may (SPEC §4 step 2, §4.7).
        review = await reflection.review_material(
            self.store,
            agent_id,
            channel_key(setup.service, setup.channel),
            self.settings.memory.channel_groups,
            records=config.review_records,
            goals=20,
        )
        await set_run_provenance(self.store, agent_id, event_id, review.provenance)
        now = self.clock.now()
        assessment = await reflection.assess(self.gateway(agent_id), agent, review.records, review.goals, now)
        serves = (
            "they serve my objectives" if assessment.serves_objectives else "they do not serve my objectives"
        )
        text = (
            f"My self-assessment: {assessment.patterns} ({serves}). "
            f"I choose to {assessment.intention.replace('_', ' ')}: {assessment.plan}"
        )
        await self.store.add_message(
            Message(
                id=derived_id(setup.received_at, event_id, "assessment"),
                agent_id=agent_id,
                conversation_id=setup.conversation_id,
                role=Role.SYSTEM,
                person_id=None,
                speaker_name="my self-assessment",
                text=text,
                created_at=max(now, setup.received_at + timedelta(microseconds=1)),
                event_id=event_id,  # part of this turn: the dialog shows it after the input
            )
        )
        return assessment.model_dump(mode="json")

    async def finish_run(
        self, agent_id: str, event_id: str, setup_data: dict[str, Any], result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """After a self-initiated run: log it, count its tokens, close its conversation.
        Returns the closed conversation (its close hooks are enqueued by the workflow)."""
        setup = TurnSetup.model_validate(setup_data)
        event = await self._event(agent_id, event_id)
        if result.get("transmitted"):
            outcome = f"said: {str(result.get('text') or '')[:300]}"
        else:
            outcome = str(result.get("reason") or "did nothing")
        conversation = await self.autonomy.finish(event, setup.conversation_id, outcome)
        return None if conversation is None else conversation.model_dump(mode="json")

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

    async def enqueue_close_hooks(self, conversation: Conversation) -> None:
        await self._enqueue_hooks(conversation)

    # conversations ---------------------------------------------------------------------
    def add_conversation_hook(self, name: str, hook: ConversationHook) -> None:
        """Run `hook(agent_id, conversation_id)` durably after each conversation closes."""
        self._hooks[name] = hook

    def conversation_hook_names(self) -> list[str]:
        return sorted(self._hooks)

    async def run_conversation_hook(self, agent_id: str, conversation_id: str, name: str) -> None:
        hook = self._hooks.get(name)
        if hook is not None:
            await hook(agent_id, conversation_id)

    def extraction_due(self, conversation_id: str, new_messages: int) -> bool:
        """Count messages per open conversation; True every `extract_every_messages`."""
        every = self.settings.conversation.extract_every_messages
        if every <= 0 or not self.extraction_names():
            return False
        count = self._unextracted.pop(conversation_id, 0) + new_messages
        if count >= every:
            return True
        if len(self._unextracted) > 10_000:  # a trigger, not a record: forgetting is safe
            self._unextracted.clear()
        self._unextracted[conversation_id] = count
        return False

    def add_extraction(self, name: str, hook: ConversationHook) -> None:
        """Run `hook(agent_id, conversation_id)` durably on an open conversation every
        `extract_every_messages` messages (it reads only what is new: a watermark)."""
        self._extractions[name] = hook

    def extraction_names(self) -> list[str]:
        return sorted(self._extractions)

    async def run_extraction(self, agent_id: str, conversation_id: str, name: str) -> None:
        hook = self._extractions.get(name)
        if hook is not None:
            await hook(agent_id, conversation_id)

    async def close_idle_conversations(self) -> int:
        closed = await self.store.close_idle_conversations(
            None, self.clock.now(), self.settings.conversation.idle_timeout_minutes * 60
        )
        for conversation in closed:
            await self._enqueue_hooks(conversation)
        return len(closed)

    async def _enqueue_hooks(self, conversation: Conversation) -> None:
        queue = self._queues.get(workflows.BACKGROUND_QUEUE)
        if queue is None:  # not a worker: the hooks run where the workers are
            return
        # Derived from the conversation, so a second pass can never run the hooks twice.
        workflow_id = derived_id(conversation.closed_at or self.clock.now(), conversation.id, "closed")
        with SetWorkflowID(workflow_id):
            await queue.enqueue_async(workflows.conversation_closed, conversation.agent_id, conversation.id)
        self.wake_queue(workflows.BACKGROUND_QUEUE)

    async def sweep_unconsolidated(self, grace: timedelta = timedelta(minutes=1)) -> int:
        """Enqueue hooks for conversations closed but never consolidated — a crash between
        the close and the enqueue would otherwise lose their memory. Imported conversations
        are remembered at import (flagged there too): their hooks never run, so neither a
        model call per imported conversation nor a culled imported memory coming back."""
        enqueued = 0
        cutoff = self.clock.now() - grace
        for agent_id in self.agents:
            for conversation in await self.store.list_conversations(agent_id, limit=200):
                if conversation.closed_at is None or conversation.closed_at > cutoff:
                    continue
                if conversation.kind == IMPORTED_KIND:
                    continue
                if await self.store.get_flag(agent_id, CONSOLIDATED_FLAG + conversation.id) is not None:
                    continue
                await self._enqueue_hooks(conversation)
                enqueued += 1
        return enqueued

    async def cull_memories(self) -> int:
        """SPEC §4.1: delete records rated below the threshold AND older than the age limit."""
        config = self.settings.memory
        older_than = self.clock.now() - timedelta(days=config.cull_after_days)
        deleted = 0
        for agent_id in self.agents:
            doomed = await self.store.cull_candidates(
                agent_id, below_importance=config.cull_below_importance, older_than=older_than
            )
            if doomed:
                deleted += await self.store.delete_records(agent_id, [r.id for r in doomed])
        return deleted

    async def purge_old_dialog(self) -> int:
        """Verbatim dialog is kept for `[memory] dialog_retention_days` (SPEC §4.1); the
        memories consolidated from it stay."""
        before = self.clock.now() - timedelta(days=self.settings.memory.dialog_retention_days)
        return sum([await self.store.purge_dialog(agent_id, before) for agent_id in self.agents])

    async def _housekeeping(self) -> None:
        """Every `housekeeping_seconds`: close idle conversations, catch unconsolidated ones, purge expired
        markers; once a day: cull memories."""
        last_cull = None
        while True:
            try:
                await self.close_idle_conversations()
                await self.sweep_unconsolidated()
                await self.store.purge_markers(self.clock.now())
                if last_cull is None or self.clock.now() - last_cull >= timedelta(days=1):
                    culled = await self.cull_memories()
                    purged = await self.purge_old_dialog()
                    last_cull = self.clock.now()
                    if culled or purged:
                        log.info("culled %d memories, purged %d old dialog lines", culled, purged)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("housekeeping failed: %s", exc)
            await asyncio.sleep(self.settings.dispatch.housekeeping_seconds)


async def _drain_workflows(timeout: float) -> None:
    """Wait (bounded) for the async DBOS workflows running on this loop to return."""
    current = asyncio.current_task()
    running = [
        task
        for task in asyncio.all_tasks()
        if task is not current and getattr(task.get_coro(), "__name__", "") == "_execute_workflow_async"
    ]
    if running:
        await asyncio.wait(running, timeout=timeout)


def _safe_sink_for(channel: Channel | None, event: Event) -> Any:
    if channel is None:
        return None
    try:
        return channel.sink_for(event)
    except Exception:
        return None
