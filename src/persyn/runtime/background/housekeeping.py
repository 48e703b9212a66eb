"""Housekeeping (SPEC §4.1, §7): the scheduler process's periodic chores — close idle
conversations, catch closed ones never consolidated (and retry failed consolidations when
due), purge expired completion markers, evaluate the guardrails (SPEC §4.10, every `[safety]
evaluate_seconds`), and once a day cull memories, purge old dialog, sweep the kept originals
nothing holds any more (`senses/library.py`: after the store commits, so a kill in between
leaves files the next sweep takes) and purge run state and channel ledgers past `[autonomy]
run_keep_days`.

`Housekeeping` receives its collaborators explicitly; the conversation jobs it enqueues go
through `ConversationJobs`, so every enqueue derives the same workflow ids. A chore over
what the store does not keep (`store/capabilities.py`: memory, dialog history, consolidation
state, model-call checkpoints) is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta

from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.memory.consolidate import IMPORTED_KIND
from persyn.runtime.background.conversation_jobs import ConversationJobs
from persyn.runtime.background.guardrails import Guardrails
from persyn.senses.library import AttachmentLibrary
from persyn.store.base import Store
from persyn.store.capabilities import capability
from persyn.store.ports.activity import ActivityPort, cull_entry
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.jobs import ConsolidationStatus
from persyn.store.ports.model_calls import ModelCallsPort

__all__ = ["Housekeeping"]

log = logging.getLogger(__name__)

# Model calls checkpointed inside a durable step matter only to a re-run of that step (after
# a crash, at the latest when a worker of the deployment next starts): a week is ample.
MODEL_CALL_KEEP = timedelta(days=7)
_SWEEP_CONVERSATIONS = 200  # the latest closed conversations of each agent the sweep reads


class Housekeeping:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        jobs: ConversationJobs,
        guardrails: Guardrails | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.agents = agents
        self.jobs = jobs
        self.guardrails = guardrails
        self._checkpoints: ModelCallsPort | None = capability(store, ModelCallsPort)
        self._history: DialogHistoryPort | None = capability(store, DialogHistoryPort)
        self._originals = AttachmentLibrary(settings.data_dir / "attachments")  # `Senses.library`'s files

    async def close_idle_conversations(self) -> int:
        closed = await self.store.close_idle_conversations(
            None, self.clock.now(), self.settings.conversation.idle_timeout_minutes * 60
        )
        for conversation in closed:
            await self.jobs.enqueue_close_hooks(conversation)
        return len(closed)

    async def sweep_unconsolidated(self, grace: timedelta = timedelta(minutes=1)) -> int:
        """Enqueue hooks for conversations closed but never consolidated — a crash between
        the close and the enqueue would otherwise lose their memory — and a retry of each
        failed consolidation that is due. Imported conversations are remembered at import
        (done there too): their hooks never run, so neither a model call per imported
        conversation nor a culled imported memory coming back."""
        enqueued = 0
        jobs, history = self.jobs.consolidations, self._history
        if jobs is None or history is None:
            return 0  # no consolidation state, or no listing, to sweep by (`store/capabilities.py`)
        cutoff = self.clock.now() - grace
        for agent_id in self.agents:
            for conversation in await history.list_conversations(agent_id, limit=_SWEEP_CONVERSATIONS):
                if conversation.closed_at is None or conversation.closed_at > cutoff:
                    continue
                if conversation.kind == IMPORTED_KIND:
                    continue
                state = await jobs.get_consolidation(agent_id, conversation.id)
                if state is not None and state.status is not ConsolidationStatus.PENDING:
                    continue  # done, or failed: retried below when due
                await self.jobs.enqueue_close_hooks(conversation)
                enqueued += 1
        return enqueued + await self.jobs.enqueue_due_retries()

    async def cull_memories(self) -> int:
        """SPEC §4.1: delete records rated below the threshold AND older than the age limit;
        each agent's cull is an entry in its activity log (the operator's memory events)."""
        config = self.settings.memory
        now = self.clock.now()
        older_than = now - timedelta(days=config.cull_after_days)
        deleted = 0
        memory = self.jobs.memory
        if memory is None:
            return 0
        log = capability(self.store, ActivityPort)
        rule = (config.cull_below_importance, config.cull_after_days)
        for agent_id in self.agents:
            doomed = await memory.cull_candidates(
                agent_id, below_importance=config.cull_below_importance, older_than=older_than
            )
            if doomed:
                deleted += await memory.delete_records(agent_id, [r.id for r in doomed])
                if log is not None:
                    await log.add_activity(cull_entry(agent_id, now, doomed, *rule, "the daily cull"))
        return deleted

    async def purge_old_dialog(self) -> int:
        """Verbatim dialog is kept for `[memory] dialog_retention_days` (SPEC §4.1); the
        memories consolidated from it stay."""
        before = self.clock.now() - timedelta(days=self.settings.memory.dialog_retention_days)
        if self._history is None:
            return 0  # a store without dialog history keeps its dialog its own way
        return sum([await self._history.purge_dialog(agent_id, before) for agent_id in self.agents])

    async def sweep_originals(self) -> int:
        """Issue 35: the kept originals go with the last dialog and memory that held them
        (`DialogHistoryPort.held_attachments`), a grace period after they were kept. Returns
        the bytes freed."""
        if self._history is None:
            return 0  # nothing to tell a held original from a free one: keep them all
        freed = 0
        for agent_id in self.agents:
            held = await self._history.held_attachments(agent_id)
            grace = timedelta(hours=self.settings.senses.original_grace_hours)
            freed += await asyncio.to_thread(self._originals.sweep, agent_id, held, self.clock.now(), grace)
        return freed

    async def purge_runs(self) -> int:
        """Run state, run conversations and channel ledger entries are kept for `[autonomy]
        run_keep_days`: far past the 24-hour budget windows and a run's retries."""
        keep = timedelta(days=self.settings.autonomy.run_keep_days)
        return await self.store.purge_runs(self.clock.now() - keep)

    async def run(self) -> None:
        """Every `housekeeping_seconds`: close idle conversations, catch unconsolidated ones,
        purge expired markers; once a day: cull memories, purge old dialog, sweep the originals
        they let go, purge old run state and old model-call checkpoints."""
        last_cull = None
        while True:
            try:
                await self.close_idle_conversations()
                await self.sweep_unconsolidated()
                await self.store.purge_markers(self.clock.now())
                if self.guardrails is not None and self.guardrails.due():
                    await self.guardrails.evaluate()  # SPEC §4.10: over recent history
                if last_cull is None or self.clock.now() - last_cull >= timedelta(days=1):
                    culled = await self.cull_memories()
                    purged = await self.purge_old_dialog()
                    await self.sweep_originals()  # after both: what they let go
                    runs = await self.purge_runs()
                    if self._checkpoints is not None:
                        await self._checkpoints.purge_model_calls(self.clock.now() - MODEL_CALL_KEEP)
                    last_cull = self.clock.now()
                    if culled or purged or runs:
                        log.info(
                            "culled %d memories, purged %d old dialog lines and %d old run rows",
                            culled,
                            purged,
                            runs,
                        )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("housekeeping failed: %s", exc)
            await asyncio.sleep(self.settings.dispatch.housekeeping_seconds)
