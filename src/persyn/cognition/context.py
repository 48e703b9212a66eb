"""Context sources (SPEC §4 step 2, §7): fetched per turn, folded into the volatile part of
the instruction. Each source fails soft: a broken one costs context, never the turn."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Protocol, cast

from persyn.cognition.deliberation import Evidence
from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.prompt import ContextSection
from persyn.core.clock import Clock
from persyn.core.records import channel_key
from persyn.memory.retrieval import Retriever, format_memories
from persyn.store.base import Observation, Store

__all__ = ["RECALLED_FLAG", "MemorySource", "PeopleSource", "recalled_ids"]

log = logging.getLogger(__name__)

RECALLED_FLAG = "recalled:"
_MAX_RECALLED = 500

_LEGEND = (
    "Memories I recalled for this moment, best first. [strong] ones I may assert as memory; "
    '[moderate] and [weak] ones I hedge ("I believe...", "I vaguely recall..."). If an answer '
    "matters and the memory is weak, I say I need to check rather than guess. The ids are for "
    "my own reference; I never say them aloud."
)


async def recalled_ids(store: Store, agent_id: str, conversation_id: str) -> list[str]:
    """Records already surfaced in a conversation (consolidation must not re-extract them)."""
    return _recalled(await store.get_flag(agent_id, RECALLED_FLAG + conversation_id))


def _recalled(raw: str | None) -> list[str]:
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return []
    if not isinstance(value, list):
        return []
    return [str(item) for item in cast(list[object], value)]


class MemorySource:
    """Retrieved autobiographical memories with their bands (SPEC §4 step 2)."""

    def __init__(
        self,
        store: Store,
        retriever: Retriever,
        clock: Clock,
        budget_tokens: Callable[[str], int],
    ) -> None:
        self.store = store
        self.retriever = retriever
        self.clock = clock
        self.budget_tokens = budget_tokens

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        participants = setup.participant_ids
        if participants is None:
            conversation = await self.store.get_conversation(setup.agent_id, setup.conversation_id)
            participants = conversation.participant_ids if conversation else ()
        result = await self.retriever.retrieve(
            setup.agent_id,
            query,
            channel=channel_key(setup.service, setup.channel),
            participants=participants,
            now=self.clock.now(),
            budget_tokens=self.budget_tokens(setup.agent_id),
        )
        if result.records:
            await self._remember_recalled(setup, [s.record.id for s in result.records])
        body = format_memories(result) if result.records else "(nothing I remember matches this)"
        if result.degraded:
            body += f"\n(My semantic recall is impaired right now: {result.degraded}. Keyword recall only.)"
        evidence = tuple(
            Evidence(record_id=s.record.id, summary=s.record.summary, score=s.score, band=s.band.value)
            for s in result.records
        )
        return [ContextSection("What I remember", f"{_LEGEND}\n{body}", evidence)]

    async def _remember_recalled(self, setup: TurnSetup, ids: list[str]) -> None:
        def merge(raw: str | None) -> str:
            merged = list(dict.fromkeys([*_recalled(raw), *ids]))[-_MAX_RECALLED:]
            return json.dumps(merged)

        await self.store.update_flag(setup.agent_id, RECALLED_FLAG + setup.conversation_id, merge)


class _Briefings(Protocol):
    async def cached(self, agent_id: str, person_id: str) -> str | None: ...


class PeopleSource:
    """The cached dossier of the person speaking (SPEC §4.4): never a model call here, so
    a stale or missing dossier costs context, not latency.

    Compartments: a dossier blends every observation of a person, so it is shown only on a
    channel where all of them were learned; what someone said in one compartment never
    reaches another through it. (Per-compartment dossiers would lift this restriction.)"""

    def __init__(self, store: Store, dossiers: Callable[[str], _Briefings]) -> None:
        self.store = store
        self.dossiers = dossiers

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        if setup.person_id is None:
            return []
        found = await self.store.observations(setup.agent_id, setup.person_id)
        # Nothing observed means no current dossier (`cached` would say None): no more reads.
        if not found or not await self._all_learned_here(setup, found):
            return []
        text = await self.dossiers(setup.agent_id).cached(setup.agent_id, setup.person_id)
        if not text:
            return []
        return [ContextSection(f"What I know about {setup.speaker_name}", text)]

    async def _all_learned_here(self, setup: TurnSetup, found: Sequence[Observation]) -> bool:
        seen: dict[str, bool] = {}
        for observation in found:
            conversation_id = observation.conversation_id
            if conversation_id is None:
                return False
            if conversation_id not in seen:
                conversation = await self.store.get_conversation(setup.agent_id, conversation_id)
                seen[conversation_id] = conversation is not None and (
                    conversation.service,
                    conversation.channel,
                ) == (setup.service, setup.channel)
            if not seen[conversation_id]:
                return False
        return True
