"""Context sources (SPEC §4 step 2, §7): fetched per turn, folded into the volatile part of
the instruction. Each source fails soft: a broken one costs context, never the turn."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, cast

from persyn.cognition.deliberation import Evidence
from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.prompt import ContextSection
from persyn.core.clock import Clock
from persyn.core.config import GraphConfig, MemoryConfig
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity, channel_key
from persyn.graph.recall import GraphContext, recall
from persyn.memory.access import Provenanced, eligible_channels, may_surface
from persyn.memory.consolidate import default_sensitivity
from persyn.memory.dialog_recall import DialogRecall, SaidLine, format_recollection, recollect
from persyn.memory.retrieval import Retriever
from persyn.store.base import Observation, Provenance, Store
from persyn.store.capabilities import GraphStore, MemoryStore
from persyn.store.ports.graph_rows import GraphView

__all__ = [
    "GRAPH_FAILURE_FLAG",
    "RECALLED_FLAG",
    "GraphSource",
    "MemorySource",
    "PeopleSource",
    "ReadHook",
    "recalled_ids",
    "remember_recalled",
]

# A source tells the run what it put in front of the model: a self-initiated run then writes
# at most where that may surface (`runtime.background.autonomy.Autonomy.noticed`).
ReadHook = Callable[[TurnSetup, Sequence[Provenanced]], Awaitable[None]]


async def _nothing_read(setup: TurnSetup, items: Sequence[Provenanced]) -> None:
    return None


log = logging.getLogger(__name__)

RECALLED_FLAG = "recalled:"
GRAPH_FAILURE_FLAG = "degraded:graph"
_MAX_RECALLED = 500

_LEGEND = (
    "Memories I recalled for this moment, best first. [strong] ones I may assert as memory; "
    '[moderate] and [weak] ones I hedge ("I believe...", "I vaguely recall..."). If an answer '
    "matters and the memory is weak, I say I need to check rather than guess. The ids are for "
    "my own reference; I never say them aloud."
)
_SAID_LEGEND = (
    "Lines marked [said] are not memories but the record of what was said, word for word, "
    "with who said it and when: I may quote them as said then, not as what is true now."
)


async def recalled_ids(store: Store, agent_id: str, conversation_id: str) -> list[str]:
    """Records already surfaced in a conversation (consolidation must not re-extract them)."""
    return _recalled(await store.get_flag(agent_id, RECALLED_FLAG + conversation_id))


def remember_recalled(
    conversation_id: str, ids: Sequence[str]
) -> tuple[str, Callable[[str | None], str | None]]:
    """The change that adds `ids` to the records surfaced in a conversation, as a flag key
    and an `update_flag` change. A reply writes it with itself (`ReplyUpkeep`): what was
    recalled for a turn is surfaced by what the agent said, in the one write a spoken turn
    makes, instead of a write of its own while the context is read."""

    def merge(raw: str | None) -> str:
        return json.dumps(list(dict.fromkeys([*_recalled(raw), *ids]))[-_MAX_RECALLED:])

    return RECALLED_FLAG + conversation_id, merge


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
        store: MemoryStore,
        retriever: Retriever,
        clock: Clock,
        budget_tokens: Callable[[str], int],
        on_read: ReadHook = _nothing_read,
        dialog: DialogRecall | None = None,
    ) -> None:
        self.store = store
        self.retriever = retriever
        self.clock = clock
        self.budget_tokens = budget_tokens
        self.on_read = on_read
        self.dialog = dialog  # raw dialog merged in (`[memory] dialog_recall`)

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        participants = setup.participant_ids
        if participants is None:
            conversation = await self.store.get_conversation(setup.agent_id, setup.conversation_id)
            participants = conversation.participant_ids if conversation else ()
        found = await recollect(
            self.retriever,
            self.dialog,
            setup.agent_id,
            query,
            channel=channel_key(setup.service, setup.channel),
            participants=participants,
            now=self.clock.now(),
            budget_tokens=self.budget_tokens(setup.agent_id),
            current_conversation=setup.conversation_id,
        )
        result = found.memories
        # The records' ids are kept with the reply (`remember_recalled`); a self-initiated
        # run writes at most where what it read (memories and dialog alike) may surface.
        if found.ranked:
            await self.on_read(
                setup, [item if isinstance(item, SaidLine) else item.record for item in found.ranked]
            )
        body = format_recollection(found) if found.ranked else "(nothing I remember matches this)"
        if result.degraded:
            body += f"\n(My semantic recall is impaired right now: {result.degraded}. Keyword recall only.)"
        evidence = tuple(
            Evidence(record_id=item.message.id, summary=_said_summary(item), score=item.score, band="said")
            if isinstance(item, SaidLine)
            else Evidence(
                record_id=item.record.id, summary=item.record.summary, score=item.score, band=item.band.value
            )
            for item in found.ranked
        )
        legend = f"{_LEGEND} {_SAID_LEGEND}" if found.said else _LEGEND
        return [ContextSection("What I remember", f"{legend}\n{body}", evidence)]


def _said_summary(line: SaidLine) -> str:
    return f'{line.message.speaker_name} said: "{line.message.text}"'


class _Briefings(Protocol):
    async def cached(self, agent_id: str, person_id: str) -> str | None: ...


class PeopleSource:
    """The cached dossiers of the people present (SPEC §4.4), the speaker first: never a
    model call here, so a stale or missing dossier costs context, not latency.

    Compartments: a dossier blends every observation of a person, so it is shown only when
    each of them could be brought up here as the memory of the conversation it was learned
    in could (`memory/access.py`: that conversation's channel, participants and sensitivity
    — the channel's default, or what its consolidation judged, whichever is higher). What
    someone said in one compartment, before a stranger joined, or in confidence, never
    reaches others through it. (Per-compartment dossiers would lift this restriction.)"""

    max_people = 4

    def __init__(
        self, store: MemoryStore, dossiers: Callable[[str], _Briefings], memory: MemoryConfig
    ) -> None:
        self.store = store
        self.dossiers = dossiers
        self.memory = memory

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        participants = setup.participant_ids
        if participants is None:
            conversation = await self.store.get_conversation(setup.agent_id, setup.conversation_id)
            participants = conversation.participant_ids if conversation else ()
        present = [p for p in participants if p != setup.agent_id]
        if setup.person_id is not None:  # the speaker first
            if setup.person_id in present:
                present.remove(setup.person_id)
            present.insert(0, setup.person_id)
        sections: list[ContextSection] = []
        formed: dict[str, bool] = {}
        for person_id in present[: self.max_people]:
            found = await self.store.observations(setup.agent_id, person_id)
            # Nothing observed means no current dossier (`cached` would say None): no more reads.
            if not found or not await self._shareable(setup, found, present, formed):
                continue
            text = await self.dossiers(setup.agent_id).cached(setup.agent_id, person_id)
            if not text:
                continue
            name = setup.speaker_name if person_id == setup.person_id else await self._name(setup, person_id)
            sections.append(ContextSection(f"What I know about {name}", text))
        return sections

    async def _name(self, setup: TurnSetup, person_id: str) -> str:
        person = await self.store.get_person(setup.agent_id, person_id)
        return person.display_name if person else "someone here"

    async def _shareable(
        self, setup: TurnSetup, found: Sequence[Observation], present: Sequence[str], formed: dict[str, bool]
    ) -> bool:
        """Every observation of the person may surface here; `formed` caches the answer
        per source conversation."""
        for observation in found:
            conversation_id = observation.conversation_id
            if conversation_id is None:
                return False
            if conversation_id not in formed:
                formed[conversation_id] = await self._may_repeat(setup, conversation_id, present)
            if not formed[conversation_id]:
                return False
        return True

    async def _may_repeat(self, setup: TurnSetup, conversation_id: str, present: Sequence[str]) -> bool:
        source = await self.store.get_conversation(setup.agent_id, conversation_id)
        if source is None:
            return False
        level = default_sensitivity(self.memory, source.service)
        memory = await self.store.get_record(
            setup.agent_id, derived_id(source.started_at, source.id, "memory")
        )
        if memory is not None and memory.sensitivity.rank > level.rank:
            level = memory.sensitivity
        as_memory = MemoryRecord(
            id=conversation_id,
            agent_id=setup.agent_id,
            created_at=source.started_at,
            channel=channel_key(source.service, source.channel),
            participant_ids=source.participant_ids,
            summary="",
            sensitivity=level,
        )
        return may_surface(
            as_memory,
            channel_key(setup.service, setup.channel),
            present,
            self.memory.channel_groups,
            agent_id=setup.agent_id,
        )


def _graph_provenance(found: GraphContext, home: str) -> list[Provenance]:
    """Where what the graph section shows may surface, conservatively: a relation's row
    keeps no participants here, so a guarded one counts as formed with nobody; entity
    attributes, read with the view of this channel, as this channel's with nobody present."""
    read = [
        Provenance(channel=r.channel, sensitivity=r.sensitivity)
        for path in (found.relations, *found.paths)
        for r in path
    ]
    if any(entity.attributes for entity in found.entities):
        read.append(Provenance(channel=home, sensitivity=Sensitivity.PRIVATE))
    return read


_GRAPH_LEGEND = (
    "How things I know of relate (from past conversations; each line is source —relation→ "
    "target). I use it as background, not as something just said."
)


class GraphSource:
    """The knowledge graph around the entities the input names (SPEC §4.3), read in the
    current compartment only. Fails soft: a broken graph store costs this section, never
    the turn; the failure is logged and kept under the flag `degraded:graph` for
    `persyn doctor`, and the prompt says the graph is unavailable."""

    def __init__(
        self,
        store: GraphStore,
        config: GraphConfig,
        channel_groups: Sequence[Sequence[str]],
        clock: Clock,
        budget_tokens: Callable[[str], int],
        on_read: ReadHook = _nothing_read,
    ) -> None:
        self.store = store
        self.config = config
        self.channel_groups = channel_groups
        self.clock = clock
        self.budget_tokens = budget_tokens
        self.on_read = on_read
        self._failing: set[str] = set()  # agents whose graph failed in this process

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        try:
            sections = await self._sections(setup, query)
        except Exception as exc:  # fail soft (SPEC §2)
            log.warning("knowledge graph unavailable: %s", exc)
            await self._report(setup.agent_id, exc)
            self._failing.add(setup.agent_id)
            return [ContextSection("How things relate", "(My knowledge graph is unavailable right now.)")]
        if setup.agent_id in self._failing:  # it works again: `persyn doctor` stops warning
            self._failing.discard(setup.agent_id)
            await self.store.set_flag(setup.agent_id, GRAPH_FAILURE_FLAG, None)
        return sections

    async def _sections(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        participants = setup.participant_ids
        if participants is None:
            conversation = await self.store.get_conversation(setup.agent_id, setup.conversation_id)
            participants = conversation.participant_ids if conversation else ()
        present = tuple(p for p in participants if p != setup.agent_id)
        now = channel_key(setup.service, setup.channel)
        view = GraphView(channel=now, eligible=eligible_channels(now, self.channel_groups), present=present)
        found = await recall(
            self.store,
            setup.agent_id,
            query,
            view,
            hops=self.config.hops,
            limit=self.config.max_relations,
            max_path_hops=self.config.max_path_hops,
        )
        if found is None:
            return []
        lines = found.lines(self.budget_tokens(setup.agent_id))
        if not lines:
            return []
        await self.on_read(setup, _graph_provenance(found, now))
        return [ContextSection("How things relate", _GRAPH_LEGEND + "\n" + "\n".join(lines))]

    async def _report(self, agent_id: str, exc: Exception) -> None:
        try:
            value = json.dumps({"at": self.clock.now().isoformat(), "error": f"{type(exc).__name__}: {exc}"})
            await self.store.set_flag(agent_id, GRAPH_FAILURE_FLAG, value)
        except Exception:  # the store itself may be what failed
            log.debug("could not record the graph failure", exc_info=True)
