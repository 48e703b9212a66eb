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
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig, Queue
from sqlalchemy import Engine

from persyn.channels.base import ChannelAdapter
from persyn.cognition import deliberation, pipeline
from persyn.cognition.goals import GoalsSource
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ToolError
from persyn.core.events import CompletionMarker, Event, EventKind, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.core.records import channel_key
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.local import OFFLINE_NOTICE
from persyn.memory.access import may_surface
from persyn.memory.embedder import Embedder
from persyn.memory.retrieval import Retriever
from persyn.people.observations import Dossiers
from persyn.runtime._dbos_sqlite import dbos_sqlite_engine
from persyn.runtime._dbos_wake import install_queue_waker
from persyn.runtime._executor import ExecutorSlot, adopt_dead_executors, claim_executor_slot
from persyn.runtime.activation import ActivationSteps, TurnCache, record_deliberation
from persyn.runtime.autonomy import (
    AUTONOMOUS_SERVICE,
    Autonomy,
    BudgetedModel,
    run_provenance,
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
from persyn.runtime.tool_steps import ToolSteps
from persyn.runtime.turn import TransmitRequest, TransmitResult
from persyn.runtime.workflows import AUTO_SPEAK, Workflows, scheduler_tick
from persyn.schedule import bootstrap_heartbeat
from persyn.store import Store
from persyn.store.base import Conversation, Identity, Message, Role
from persyn.usage.meter import Meter
from persyn.usage.prometheus import PrometheusAdapter

__all__ = ["AUTO_SPEAK", "DISPLAY_NAME_PREF", "ConversationHook", "Runtime"]

DISPLAY_NAME_PREF = "display_name"

_SENT_FLAG = "sent:"  # + service:channel: what the agent initiated there lately (JSON)
_REPLIED_FLAG = "replied:"  # + service:channel: the agent's replies there lately (JSON)
_SENDS_FLAG = "sends:"  # + event id: the messages a run sent to contacts (JSON list of keys)

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
        await record_deliberation(self.store, agent_id, event_id, trace, self.clock.now())

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
