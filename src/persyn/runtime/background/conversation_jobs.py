"""Conversation jobs (SPEC §4 step 8, §4.3, §4.4): what runs on the background queue about
a conversation — its close hooks (consolidation, observations, graph extraction) once it
closes, incremental extraction while it is open — and the consolidation state machine.

`ConversationJobs` receives its collaborators explicitly (settings, store, clock, a gateway
lookup, the background queue as a `JobQueue`) instead of the whole runtime. Every
enqueue of a conversation's close hooks derives its workflow id with
`close_hooks_workflow_id`, so the close of a self-initiated run, the idle close and the
sweep name the same workflow and DBOS runs it once.

Consolidation is a state machine in the store (`store/ports/jobs.py`): pending once the hooks are
enqueued, done once consolidated, failed (attempts, next attempt, last error) when the model
failed. A failed one is retried by the housekeeping sweep under a fresh workflow id per
attempt (`consolidation_retry_id`: DBOS returns the existing workflow for a reused id, so a
reused id would never run again), with exponential backoff, until it succeeds; `persyn
doctor` reports it meanwhile. A store without that state (the "consolidation jobs"
capability, `store/capabilities.py`) gets no consolidation: the dialog is kept, no memory
is formed from it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from persyn.cognition.context import (
    GRAPH_FAILURE_FLAG,
    GraphSource,
    MemorySource,
    PeopleSource,
    ReadHook,
    recalled_ids,
)
from persyn.cognition.pipeline import ContextSource
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ModelError, StoreError
from persyn.core.ids import derived_id
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.registry import context_window_for
from persyn.graph.extract import GraphExtractor
from persyn.memory.consolidate import IMPORTED_KIND, Consolidator, default_sensitivity
from persyn.memory.dialog_recall import DialogRecall
from persyn.memory.embedder import Embedder, embedder_from_config
from persyn.memory.retrieval import Retriever
from persyn.people.observations import Dossiers, Observer
from persyn.runtime.background.autonomy import run_sensitivity
from persyn.runtime.durable.dispatch import BACKGROUND_QUEUE, Dispatcher
from persyn.store.base import Conversation, Store
from persyn.store.capabilities import GraphStore, MemoryStore, capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.jobs import Consolidation, ConsolidationStatus, JobsPort
from persyn.usage import context as usage_context

__all__ = [
    "CONSOLIDATE_HOOK",
    "ConversationHook",
    "ConversationJobs",
    "JobQueue",
    "JobWorkflow",
    "JobWorkflows",
    "MemoryServices",
    "close_hooks_workflow_id",
    "consolidation_retry_id",
    "retry_delay",
]

log = logging.getLogger(__name__)

ConversationHook = Callable[[str, str], Awaitable[None]]
# (agent_id, conversation_id[, trace_parent]): the trace a spawning turn carries (SPEC App. D)
JobWorkflow = Callable[..., Coroutine[Any, Any, None]]

CONSOLIDATE_HOOK = "consolidate"
_FIRST_RETRY = timedelta(minutes=2)
_LAST_RETRY = timedelta(hours=6)
_UNEXTRACTED_MAX = 10_000


def close_hooks_workflow_id(conversation_id: str, closed_at: datetime) -> str:
    """The one workflow id of a conversation's close hooks: from the conversation and when
    it closed (a conversation closes once), whoever enqueues them."""
    return derived_id(closed_at, conversation_id, "closed")


def consolidation_retry_id(conversation_id: str, closed_at: datetime, failures: int) -> str:
    """A fresh id for the retry after `failures` failed attempts (a reused id would return
    the finished workflow instead of running again); the same for every sweep meanwhile."""
    return derived_id(closed_at, conversation_id, "consolidate", str(failures))


def retry_delay(failures: int) -> timedelta:
    """Backoff after `failures` failed attempts: 2 minutes, doubling, at most 6 hours."""
    return min(_FIRST_RETRY * 2 ** max(0, failures - 1), _LAST_RETRY)


@dataclass(frozen=True)
class JobWorkflows:
    """The durable workflows this module enqueues (registered in `runtime/durable/workflows.py`)."""

    close_hooks: JobWorkflow
    consolidation_retry: JobWorkflow


class JobQueue:
    """The background queue as the conversation jobs enqueue on it: the one late binding of
    the composition root.

    The jobs' workflows (`Workflows.conversation_closed`, `consolidation_retry`) run these
    jobs, so they are built after the jobs, over them: `build_runtime` binds them here before
    it returns (`bind`), so a built runtime is wired whole. The dispatcher is the worker's,
    given while workers run in this process (`open` at start, `close` at stop); without it an
    enqueue does nothing and says so (the hooks then run where the workers are)."""

    def __init__(self) -> None:
        self._workflows: JobWorkflows | None = None
        self._dispatcher: Dispatcher | None = None

    def bind(self, workflows: JobWorkflows) -> None:
        self._workflows = workflows

    def open(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    def close(self) -> None:
        self._dispatcher = None

    @property
    def workflows(self) -> JobWorkflows:
        if self._workflows is None:
            raise RuntimeError("the conversation jobs' workflows are not bound (build_runtime binds them)")
        return self._workflows

    async def enqueue(
        self,
        workflow_id: str,
        workflow: JobWorkflow,
        agent_id: str,
        conversation_id: str,
        trace_parent: str | None = None,
    ) -> bool:
        """Enqueue once per id (DBOS returns the existing workflow for a reused id); False
        where no workers run here. `trace_parent` is passed on only when there is one, so a
        job enqueued outside any turn has the arguments it always had."""
        if self._dispatcher is None:
            return False
        extra = (trace_parent,) if trace_parent else ()
        await self._dispatcher.enqueue_once(
            BACKGROUND_QUEUE, workflow, workflow_id, agent_id, conversation_id, *extra
        )
        return True


@dataclass(frozen=True)
class MemoryServices:
    embedder: Embedder | None
    retriever: Retriever | None  # None: the store offers no autobiographical memory
    degraded: str | None


class ConversationJobs:
    """Close hooks and incremental extraction of one deployment's conversations."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        gateway: Callable[[str], ModelGateway],
        queue: JobQueue,
    ) -> None:
        self.settings = settings
        self.store = store
        self.memory: MemoryStore | None = capability(store, MemoryStore)
        self.consolidations: JobsPort | None = capability(store, JobsPort)
        self.clock = clock
        self.agents = agents
        self.gateway = gateway
        self._queue = queue
        self.embedder: Embedder | None = None
        self._hooks: dict[str, ConversationHook] = {}
        self._extractions: dict[str, ConversationHook] = {}
        self._unextracted: dict[str, int] = {}  # messages since the last extraction trigger

    # set-up ------------------------------------------------------------------------------
    def start_memory(self, context_sources: list[ContextSource], noticed: ReadHook) -> MemoryServices:
        """The encoder, retrieval as a context source, and consolidation after each
        conversation. An unavailable encoder degrades to keyword recall (SPEC §6); a store
        without autobiographical memory (`store/capabilities.py`) to none of the three, nor
        observations about people: the agent answers from the conversation alone."""
        memory = self.memory
        if memory is None:
            missing = "this store offers no autobiographical memory"
            log.warning("%s: no recall, no consolidation, no observations", missing)
            return MemoryServices(None, None, missing)
        degraded = None
        try:
            self.embedder = embedder_from_config(self.settings.memory)
        except Exception as exc:
            self.embedder = None
            degraded = f"encoder {self.settings.memory.embedder!r} unavailable: {exc}"
            log.warning("%s; memory falls back to keyword recall", degraded)
        retriever = Retriever(memory, self.embedder, self.settings.memory)
        history = capability(self.store, DialogHistoryPort)
        dialog = (
            DialogRecall(history, memory, self.embedder, self.settings.memory)
            if history is not None and self.settings.memory.dialog_recall
            else None
        )
        context_sources.append(
            MemorySource(memory, retriever, self.clock, self.memory_budget, on_read=noticed, dialog=dialog)
        )
        if self.consolidations is not None:  # the state machine consolidation runs in
            self.add_conversation_hook(CONSOLIDATE_HOOK, self.consolidate_conversation)
        # People (SPEC §4.4): observations after each conversation, dossiers in context.
        self.add_conversation_hook("observe", self.observe_conversation)
        self.add_extraction("observe", self.observe_so_far)
        context_sources.append(PeopleSource(memory, self.dossiers, self.settings.memory))
        return MemoryServices(self.embedder, retriever, degraded)

    def start_graph(self, context_sources: list[ContextSource], noticed: ReadHook) -> None:
        """Graph context per turn and extraction after each conversation (SPEC §4.3);
        `[graph] enabled = false`, or a store without the graph, leaves both out."""
        graph = capability(self.store, GraphStore)
        if not self.settings.graph.enabled or graph is None:
            return
        context_sources.append(
            GraphSource(
                graph,
                self.settings.graph,
                self.settings.memory.channel_groups,
                self.clock,
                self.graph_budget,
                on_read=noticed,
            )
        )
        self.add_conversation_hook("graph", self.graph_conversation)
        self.add_extraction("graph", self.graph_so_far)

    def memory_budget(self, agent_id: str) -> int:
        agent = self.agents[agent_id]
        return int(context_window_for(self.settings, agent) * self.settings.memory.budget_fraction)

    def graph_budget(self, agent_id: str) -> int:
        agent = self.agents[agent_id]
        return int(context_window_for(self.settings, agent) * self.settings.graph.budget_fraction)

    # people ------------------------------------------------------------------------------
    def dossiers(self, agent_id: str) -> Dossiers:
        return Dossiers(self._memory(), self.gateway(agent_id), self.agents[agent_id].name)

    def _memory(self) -> MemoryStore:
        """The store's memory, for the jobs `start_memory` registers only when it has one."""
        if self.memory is None:
            raise StoreError("this store offers no autobiographical memory")
        return self.memory

    async def observe_conversation(self, agent_id: str, conversation_id: str, *, closed: bool = True) -> None:
        """Extract and reconcile observations about who spoke (what is new since the last
        reading: the rest once closed, so far while open), then refresh their dossiers (off
        the critical path: a turn only ever reads a cached dossier)."""
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        agent = self.agents.get(agent_id)
        if conversation is None or agent is None or (closed and conversation.closed_at is None):
            return
        observer = Observer(self._memory(), self.gateway(agent_id), agent.name)
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

    async def observe_so_far(self, agent_id: str, conversation_id: str) -> None:
        await self.observe_conversation(agent_id, conversation_id, closed=False)

    # knowledge graph ---------------------------------------------------------------------
    async def graph_conversation(self, agent_id: str, conversation_id: str, *, closed: bool = True) -> None:
        """Extract what is new in a conversation (the rest of it once closed; so far while
        open) into the graph. A failure is logged and flagged for `persyn doctor`; what was
        not read is read on the next run."""
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        agent = self.agents.get(agent_id)
        if conversation is None or agent is None or (closed and conversation.closed_at is None):
            return
        graph = capability(self.store, GraphStore)
        if graph is None:
            return
        extractor = GraphExtractor(graph, self.gateway(agent_id), agent.name)
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

    async def graph_so_far(self, agent_id: str, conversation_id: str) -> None:
        await self.graph_conversation(agent_id, conversation_id, closed=False)

    # consolidation -------------------------------------------------------------------------
    async def consolidate_conversation(self, agent_id: str, conversation_id: str) -> None:
        """Consolidate a closed conversation once. A model failure keeps the dialog and is
        recorded (attempts, next attempt, error), for the sweep to retry and the doctor to
        report; a done one is never consolidated again (a culled memory stays culled)."""
        jobs, memory = self.consolidations, self.memory
        if jobs is None or memory is None:
            return
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        if conversation is None or conversation.closed_at is None:
            return
        agent = self.agents.get(agent_id)
        if agent is None:
            return
        state = await jobs.get_consolidation(agent_id, conversation_id)
        if state is not None and state.status is ConsolidationStatus.DONE:
            return
        consolidator = Consolidator(
            memory, self.gateway(agent_id), self.embedder, self.settings.memory, agent.name
        )
        recalled = await recalled_ids(self.store, agent_id, conversation_id)
        run = await self.store.get_run_conversation(agent_id, conversation_id)
        tags: tuple[str, ...] = ()
        kind = "conversation"
        if run is not None and run.reminder_id and run.kind == "reminder":
            tags, kind = ("reminder", f"reminder-{run.reminder_id}"), "reminder"
        elif run is not None and run.kind == "heartbeat":
            tags, kind = ("heartbeat",), "reflection"
        # A self-initiated run's memory is at least as sensitive as what the run read.
        floor = run_sensitivity(run)
        try:
            result = await consolidator.consolidate(
                agent_id, conversation, recalled, extra_tags=tags, kind=kind, floor=floor
            )
        except ModelError as exc:
            # Degrade: the dialog is kept, and the sweep retries later.
            failures = (state.attempts if state is not None else 0) + 1
            retry_at = self.clock.now() + retry_delay(failures)
            log.warning(
                "consolidation of %s failed (attempt %d; next at %s): %s",
                conversation_id,
                failures,
                retry_at.isoformat(),
                exc,
            )
            await jobs.set_consolidation(
                Consolidation(
                    agent_id=agent_id,
                    conversation_id=conversation_id,
                    status=ConsolidationStatus.FAILED,
                    attempts=failures,
                    next_attempt_at=retry_at,
                    last_error=f"{type(exc).__name__}: {exc}",
                    updated_at=self.clock.now(),
                )
            )
            return
        await jobs.set_consolidation(
            Consolidation(
                agent_id=agent_id,
                conversation_id=conversation_id,
                status=ConsolidationStatus.DONE,
                attempts=0 if state is None else state.attempts,
                detail=result.skipped or "stored",
                updated_at=self.clock.now(),
            )
        )

    # close hooks ---------------------------------------------------------------------------
    def add_conversation_hook(self, name: str, hook: ConversationHook) -> None:
        """Run `hook(agent_id, conversation_id)` durably after each conversation closes."""
        self._hooks[name] = hook

    def conversation_hook_names(self) -> list[str]:
        return sorted(self._hooks)

    async def run_conversation_hook(self, agent_id: str, conversation_id: str, name: str) -> None:
        hook = self._hooks.get(name)
        if hook is not None:
            with await self._exchange(agent_id, conversation_id):
                await hook(agent_id, conversation_id)

    async def _exchange(self, agent_id: str, conversation_id: str) -> AbstractContextManager[object]:
        """The attribution of the exchange background work serves (SPEC App. C): the channel
        and surface of its conversation, so consolidation, observations and the graph are
        billed where the conversation happened, not under `(none)`."""
        conversation = await self.store.get_conversation(agent_id, conversation_id)
        if conversation is None:
            return contextlib.nullcontext()
        return usage_context.rebind(surface=conversation.service, channel=conversation.channel)

    async def enqueue_close_hooks(
        self, conversation: Conversation, *, trace_parent: str | None = None
    ) -> bool:
        """Enqueue the close hooks of a closed conversation under its one derived id (a
        second enqueue, by the sweep or a replay, names the same workflow: DBOS runs it once).
        `trace_parent`: the trace of the turn that closed it, which the hooks' spans join."""
        closed_at = conversation.closed_at or self.clock.now()
        workflow_id = close_hooks_workflow_id(conversation.id, closed_at)
        enqueued = await self._queue.enqueue(
            workflow_id,
            self._queue.workflows.close_hooks,
            conversation.agent_id,
            conversation.id,
            trace_parent,
        )
        if enqueued and conversation.kind != IMPORTED_KIND and self.consolidations is not None:
            await self.consolidations.consolidation_pending(
                conversation.agent_id, conversation.id, self.clock.now()
            )
        return enqueued

    async def enqueue_due_retries(self, limit: int = 100) -> int:
        """Enqueue a retry of each failed consolidation whose next attempt is due."""
        enqueued = 0
        if self.consolidations is None:
            return 0
        for state in await self.consolidations.consolidations(
            ConsolidationStatus.FAILED, due_by=self.clock.now(), limit=limit
        ):
            if state.agent_id not in self.agents:
                continue
            conversation = await self.store.get_conversation(state.agent_id, state.conversation_id)
            if conversation is None or conversation.closed_at is None:
                continue
            workflow_id = consolidation_retry_id(conversation.id, conversation.closed_at, state.attempts)
            if await self._queue.enqueue(
                workflow_id, self._queue.workflows.consolidation_retry, state.agent_id, state.conversation_id
            ):
                enqueued += 1
        return enqueued

    # incremental extraction ----------------------------------------------------------------
    def extraction_due(self, conversation_id: str, new_messages: int) -> bool:
        """Count messages per open conversation; True every `extract_every_messages`."""
        every = self.settings.conversation.extract_every_messages
        if every <= 0 or not self.extraction_names():
            return False
        count = self._unextracted.pop(conversation_id, 0) + new_messages
        if count >= every:
            return True
        if len(self._unextracted) > _UNEXTRACTED_MAX:  # a trigger, not a record: forgetting is safe
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
            with await self._exchange(agent_id, conversation_id):
                await hook(agent_id, conversation_id)
