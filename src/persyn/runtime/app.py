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
import json
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig, Queue
from sqlalchemy import Engine

from persyn.channels.base import ChannelAdapter
from persyn.cognition import deliberation, pipeline
from persyn.cognition.context import GRAPH_FAILURE_FLAG, GraphSource, MemorySource, PeopleSource, recalled_ids
from persyn.cognition.goals import GoalsSource
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ModelError, ToolError
from persyn.core.events import CompletionMarker, Event, EventKind, Notice, Outbound, Speaker
from persyn.core.ids import derived_id, new_id
from persyn.core.records import channel_key
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.local import OFFLINE_NOTICE
from persyn.graph.extract import GraphExtractor
from persyn.memory.access import may_surface
from persyn.memory.consolidate import CONSOLIDATED_FLAG, IMPORTED_KIND, Consolidator, default_sensitivity
from persyn.memory.embedder import Embedder, embedder_from_config
from persyn.memory.retrieval import Retriever
from persyn.people.observations import Dossiers, Observer
from persyn.runtime._dbos_sqlite import dbos_sqlite_engine
from persyn.runtime._dbos_wake import install_queue_waker
from persyn.runtime._executor import ExecutorSlot, adopt_dead_executors, claim_executor_slot
from persyn.runtime.activation import DELIBERATION_FLAG, ActivationSteps, TurnCache, record_deliberation
from persyn.runtime.autonomy import (
    AUTONOMOUS_SERVICE,
    RUN_FLAG,
    Autonomy,
    BudgetedGateway,
    run_kind,
    run_provenance,
    run_sensitivity,
)
from persyn.runtime.dispatch import (
    BACKGROUND_QUEUE,
    EVENTS_QUEUE,
    ClientDispatcher,
    Intake,
    Markers,
    WorkerDispatcher,
)
from persyn.runtime.durable import APPLICATION_VERSION
from persyn.runtime.local_models import LocalModels
from persyn.runtime.memory_ops import context_window_for
from persyn.runtime.tool_steps import ToolSteps
from persyn.runtime.turn import TransmitRequest, TransmitResult
from persyn.runtime.workflows import AUTO_SPEAK, Workflows, scheduler_tick
from persyn.schedule import bootstrap_heartbeat
from persyn.store import Store
from persyn.store.base import Conversation, Identity, Message, Role
from persyn.usage.meter import Meter
from persyn.usage.prometheus import PrometheusAdapter

__all__ = ["AUTO_SPEAK", "DELIBERATION_FLAG", "DISPLAY_NAME_PREF", "ConversationHook", "Runtime"]

DISPLAY_NAME_PREF = "display_name"

_SENT_FLAG = "sent:"  # + service:channel: what the agent initiated there lately (JSON)
_REPLIED_FLAG = "replied:"  # + service:channel: the agent's replies there lately (JSON)
_SENDS_FLAG = "sends:"  # + event id: the messages a run sent to contacts (JSON list of keys)

log = logging.getLogger(__name__)

ConversationHook = Callable[[str, str], Awaitable[None]]


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
        channels: dict[str, ChannelAdapter],
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
        self._hooks: dict[str, ConversationHook] = {}
        self._extractions: dict[str, ConversationHook] = {}
        self._unextracted: dict[str, int] = {}  # messages since the last extraction trigger
        self._background: set[asyncio.Task[None]] = set()
        self.embedder: Embedder | None = None
        self.retriever: Retriever | None = None
        self.memory_degraded: str | None = None
        self._launched = False
        self._dbos_engine: Engine | None = None
        self._executor_slot: ExecutorSlot | None = None
        self._queues: dict[str, Queue] = {}  # as registered at start (reading one back costs a query)
        self._worker: WorkerDispatcher | None = None

    def bind_workflows(self, activation: ActivationSteps, tools: ToolSteps, workflows: Workflows) -> None:
        """The activation's steps and the DBOS workflows over them (they call back into
        this runtime's transmit and conversation jobs, so they are built after it)."""
        self.activation = activation
        self.tools = tools
        self.workflows = workflows

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
        for agent in self.agents.values():
            self.gateways[agent.id] = BudgetedGateway(
                self.settings,
                agent,
                self.meter,
                local_factory=self.local_models.model,
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
        return self.gateways[agent_id]

    def offline_notice(self) -> str | None:
        if not self.local_models.in_use:
            return None
        if any(self.activation.tiny_deliberator(agent_id) for agent_id in self.agents):
            return (
                OFFLINE_NOTICE + " Self-critique is off with the tiny model ([deliberation] offline_model)."
            )
        return OFFLINE_NOTICE

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
        await record_deliberation(self.store, agent_id, event_id, trace)

    async def _gate(self, setup: TurnSetup, text: str) -> deliberation.Decision | None:
        """Hard gates before anything is sent: silence instead, with the reason, or None."""
        if not deliberation.clean_for_transmit(text):
            return deliberation.Decision(action="silent", reason="nothing was left to say")
        if not deliberation.may_be_redundant(text):
            return None
        dialog = await self._turn_dialog(setup)
        echo = deliberation.redundant_with(
            text,
            dialog,
            self.settings.deliberation.redundancy_threshold,
            asker=setup.person_id if setup.addressed else None,
        )
        if echo is not None:
            return deliberation.Decision(
                action="silent", reason=f"{echo.speaker_name} already said what I would have said"
            )
        return None

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
        now = self.clock.now()
        ttl = timedelta(seconds=self.settings.dispatch.marker_ttl_seconds)
        channel = self.channels.get(event.service)
        draft = outcome.draft
        decision = outcome.decision

        async def unsent(reason: str, level: str) -> TransmitResult:
            marker = CompletionMarker(
                event_id=event_id, transmitted=False, reason=reason, created_at=now, expires_at=now + ttl
            )
            await self.store.put_marker(agent_id, marker)
            self._marker_put(marker)
            await _safe_notice(channel, event, Notice(level=level, text=reason))
            return TransmitResult(transmitted=False, reason=reason)

        if setup.kind != "message":  # a self-initiated run the autonomy budget stopped says so
            stopped = (await self.autonomy.spent(event)).stopped
            if stopped is not None:
                return await unsent(stopped, "info")
        if draft is not None and draft.budget:  # the channel's reply budget is used
            skipped = deliberation.Decision(action="silent", reason=draft.budget)
            await self._record_deliberation(
                agent_id, event_id, {"mode": setup.mode, "decision": skipped.model_dump(mode="json")}
            )
            return await unsent(draft.budget, "info")
        if draft is not None and draft.reply.text is None:
            return await unsent(f"I could not produce a reply: {draft.reply.failure}", "error")
        if decision is not None and decision.action in ("speak", "redirect"):
            decision = await self._gate(setup, outcome.text or "") or decision
        critiques = [c.model_dump(mode="json") for c in outcome.critiques]
        used = [u.model_dump(mode="json") for u in draft.tools] if draft is not None else []
        trips = [t.model_dump(mode="json") for t in draft.trips] if draft is not None else []
        if critiques or used or (decision is not None and decision.reason != AUTO_SPEAK):
            trace: dict[str, Any] = {"mode": setup.mode, "critiques": critiques}
            if used:
                trace["tools"] = used
            if trips:  # a loop breaker stopped the tool loop: recorded (SPEC §4.6)
                trace["trips"] = trips
            if decision is not None:
                trace["decision"] = decision.model_dump(mode="json")
            await self._record_deliberation(agent_id, event_id, trace)
        if decision is None or decision.action == "silent":
            reason = decision.reason if decision is not None else "no decision"
            return await unsent(f"{self.agents[agent_id].name} chose silence: {reason}", "info")
        text = deliberation.clean_for_transmit(outcome.text or "")
        reason: str | None = None
        target = channel
        service, channel_name = event.service, event.channel
        if decision.action == "decline":
            text = (
                deliberation.clean_for_transmit(decision.message or "")
                or f"I'd rather not. {decision.reason}"
            )
            reason = f"declined: {decision.reason}"
        elif decision.action == "redirect":
            service, _, channel_name = (decision.redirect_to or "").partition(":")
            target = self.channels.get(service)
            if target is None or not channel_name:
                target, service, channel_name = channel, event.service, event.channel
                reason = f"wanted to redirect to {decision.redirect_to!r}, which is not available here"
            else:
                reason = f"redirected to {decision.redirect_to}: {decision.reason}"
        agent = self.agents[agent_id]

        made: list[CompletionMarker] = []

        def marker(message: Message) -> CompletionMarker:
            made.append(
                CompletionMarker(
                    event_id=event_id,
                    transmitted=True,
                    text=message.text,
                    reason=reason,
                    created_at=now,
                    expires_at=now + ttl,
                )
            )
            return made[-1]

        # The reply and its marker in one transaction.
        message = await pipeline.record_reply(self.store, agent.name, setup, text, now, marker)
        await self._spend_reply_budget(agent_id, event_id, service, channel_name, message.text, now)
        if made:
            self._marker_put(made[-1])
        outbound = Outbound(
            event_id=event_id,
            agent_id=agent_id,
            service=service,
            channel=channel_name,
            conversation_id=setup.conversation_id,
            message_id=message.id,
            text=message.text,
        )
        if draft is not None and draft.prepared is not None:
            await pipeline.clear_woven(self.store, agent_id, draft.prepared.woven)
        if target is not None:
            try:
                await target.deliver(outbound)
            except Exception as exc:  # the reply is stored and marked; the surface failed
                log.warning("channel %s failed to deliver: %s", service, exc)
        if target is not channel and channel is not None:
            await _safe_notice(channel, event, Notice(level="info", text=reason or "answered elsewhere"))
        return TransmitResult(
            transmitted=True, action=decision.action, text=message.text, message_id=message.id, reason=reason
        )

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
        """The agent initiates (SPEC §4.5): the message is stored as said by the agent in a
        conversation with the person on that channel, then delivered if that channel runs in
        this process (otherwise it waits in the dialog for the channel to show it).
        `call_key` is the tool call's (`run_tool`): a send under a key already counted is the
        same call run again; without one, every send counts."""
        text = self.validate_text(text)
        now = self.clock.now()
        await self._check_outreach_audience(agent_id, event_id, person_id, service, channel)
        await self._count_outreach(agent_id, event_id, call_key)
        await self._spend_channel_budget(agent_id, service, channel, text, now)
        conversation = await self.store.open_conversation(
            agent_id, service, channel, [person_id], now, self.settings.conversation.idle_timeout_minutes * 60
        )
        message = Message(
            id=new_id(now),
            agent_id=agent_id,
            conversation_id=conversation.id,
            role=Role.AGENT,
            person_id=None,
            speaker_name=self.agents[agent_id].name,
            text=text,
            created_at=now,
            event_id=None,
        )
        await self.store.add_message(message)
        target = self.channels.get(service)
        if target is None:
            return f"stored in my conversation with them on {service}:{channel} (that channel is not connected here)"
        outbound = Outbound(
            event_id=event_id,
            agent_id=agent_id,
            service=service,
            channel=channel,
            conversation_id=conversation.id,
            message_id=message.id,
            text=text,
        )
        try:
            await target.deliver(outbound)
        except Exception as exc:
            return f"stored, but {service} failed to deliver it: {exc}"
        return f"delivered on {service}:{channel}"

    async def _check_outreach_audience(
        self, agent_id: str, event_id: str, person_id: str, service: str, channel: str
    ) -> None:
        """A self-initiated run (a beat, a reminder) tells someone only what may surface in
        front of them there: its provenance is the meet of everything it read
        (`autonomy.narrow_run`), so a beat that reviewed Ann's private memories may write to
        Ann on her channel, never to Bob. A conversation turn relays on behalf of the people
        present, who see what it read; it is not gated here."""
        event = await self._event(agent_id, event_id)
        if event.kind is EventKind.MESSAGE:
            return
        home = channel_key(event.service, event.channel)
        provenance = await run_provenance(self.store, agent_id, event_id, home)
        target = channel_key(service, channel)
        if not may_surface(
            provenance, target, (person_id,), self.settings.memory.channel_groups, agent_id=agent_id
        ):
            raise ToolError(
                f"not sent: this run read things that may not be told to this person on {target} "
                f"(they formed on {provenance.channel or 'no channel'}, {provenance.sensitivity.value}); "
                "write to someone they may reach, or leave it"
            )

    async def messages_sent(self, agent_id: str, event_id: str) -> int:
        """How many messages the run of `event_id` has sent to contacts: every send past the
        cap, including one the channel budget or the channel then refused."""
        return len(_sends(await self.store.get_flag(agent_id, _SENDS_FLAG + event_id)))

    async def _count_outreach(self, agent_id: str, event_id: str, call_key: str | None) -> None:
        """`[autonomy] max_messages_per_run` over the whole run, atomically in the store (the
        tool registry is rebuilt for every call: a counter there restarted each time, and one
        turn sent 16 messages to 8 contacts). A send is keyed by the tool call that makes it,
        so a tool-call step re-run after a crash counts once and two calls count twice,
        whatever they say (a key of what is sent let texts differing only in spaces pass as
        re-runs: 48 messages under a cap of 2). Refused sends raise ToolError, which the
        model reads."""
        limit = self.settings.autonomy.max_messages_per_run
        key = call_key or new_id(self.clock.now())  # no durable step to re-run: a send of its own

        def count(raw: str | None) -> str | None:
            sends = _sends(raw)
            if key in sends:
                return raw  # this very call, again (a re-run step): already counted
            if len(sends) >= limit:
                raise ToolError(
                    f"message cap reached: you have already sent {len(sends)} messages this turn (the "
                    f"most allowed is {limit}); this one was not sent"
                )
            return json.dumps([*sends, key])

        await self.store.update_flag(agent_id, _SENDS_FLAG + event_id, count)

    async def _spend_channel_budget(
        self, agent_id: str, service: str, channel: str, text: str, now: Any
    ) -> None:
        """A rolling 24-hour budget of what the agent initiates per channel (SPEC §4.5): the
        first defence against an agent that keeps writing. Refused sends raise ToolError,
        which the model reads."""
        limit = self.settings.autonomy.channel_message_tokens
        cost = max(1, len(text) // 4)
        key = f"{_SENT_FLAG}{service}:{channel}"

        def spend(raw: str | None) -> str | None:
            try:
                spent = [(str(at), int(n)) for at, n in json.loads(raw or "[]")]
            except (ValueError, TypeError):
                spent = []
            since = (now - timedelta(hours=24)).isoformat()
            spent = [(at, n) for at, n in spent if at > since]
            used = sum(n for _, n in spent)
            if used + cost > limit:
                raise ToolError(
                    f"not sent: I have initiated {used} of my {limit} tokens on {service}:{channel} in the "
                    "last 24 hours; this would exceed it. Wait, or say less."
                )
            return json.dumps([*spent, (now.isoformat(), cost)])

        await self.store.update_flag(agent_id, key, spend)

    async def _reply_budget_spent(self, setup: TurnSetup) -> str | None:
        """Why the channel gets no generated reply now, or None: its rolling 24-hour budget of
        reply tokens (`[autonomy] channel_reply_tokens`, SPEC §4.5) is used — the primary
        defence against two agents talking forever. Self-initiated runs on the agent's own
        surface (no one reads it) have the autonomy budget instead."""
        if setup.service == AUTONOMOUS_SERVICE:
            return None
        limit = self.settings.autonomy.channel_reply_tokens
        key = f"{_REPLIED_FLAG}{setup.service}:{setup.channel}"
        since = (self.clock.now() - timedelta(hours=24)).isoformat()
        used = sum(n for at, n, _ in _replies(await self.store.get_flag(setup.agent_id, key)) if at > since)
        if used < limit:
            return None
        reason = (
            f"no reply: the reply budget of {limit} tokens per 24 hours on {setup.service}:{setup.channel} "
            f"is used ({used}); replies resume as the window moves on"
        )
        log.warning("agent %s: %s", setup.agent_id, reason)  # the operator's notice
        return reason

    async def _spend_reply_budget(
        self, agent_id: str, event_id: str, service: str, channel: str, text: str, now: Any
    ) -> None:
        """Count a transmitted reply against its channel's reply budget, once per event (a
        re-run transmit step counts it once)."""
        cost = max(1, len(text) // 4)
        since = (now - timedelta(hours=24)).isoformat()

        def spend(raw: str | None) -> str:
            spent = [entry for entry in _replies(raw) if entry[0] > since]
            if any(entry[2] == event_id for entry in spent):
                return json.dumps(spent)
            return json.dumps([*spent, (now.isoformat(), cost, event_id)])

        await self.store.update_flag(agent_id, f"{_REPLIED_FLAG}{service}:{channel}", spend)

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
        if self._worker is None:  # not a worker: the hooks run where the workers are
            return
        # Derived from the conversation, so a second pass can never run the hooks twice.
        workflow_id = derived_id(conversation.closed_at or self.clock.now(), conversation.id, "closed")
        await self._worker.enqueue_once(
            BACKGROUND_QUEUE,
            self.workflows.conversation_closed,
            workflow_id,
            conversation.agent_id,
            conversation.id,
        )

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


def _replies(raw: str | None) -> list[tuple[str, int, str]]:
    """A channel's reply-budget entries: (when, tokens, event id)."""
    try:
        return [(str(at), int(n), str(event_id)) for at, n, event_id in json.loads(raw or "[]")]
    except (ValueError, TypeError):
        return []


def _sends(raw: str | None) -> list[str]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return [str(key) for key in value] if isinstance(value, list) else []


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


def _safe_sink_for(channel: ChannelAdapter | None, event: Event) -> Any:
    if channel is None:
        return None
    try:
        return channel.sink_for(event)
    except Exception:
        return None


async def _safe_notice(channel: ChannelAdapter | None, event: Event, notice: Notice) -> None:
    if channel is None:
        return
    with contextlib.suppress(Exception):
        await channel.notice(event, notice)
