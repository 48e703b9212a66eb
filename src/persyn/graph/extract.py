"""Knowledge-graph population (SPEC §4.3): a model (task `extract`, schema-constrained
output, usage stage `graph`) lists the entities a stretch of dialog mentions and the typed
relations between them; the store upserts them with the conversation's provenance (channel,
the people present, a sensitivity that the model may raise above the channel's default but
never lower).

Extraction is incremental: a per-conversation watermark (`store/unread.py`: the last
message extracted) means each message is read once, with a few earlier ones shown
as context only. The runtime runs it every `[graph] extract_every_messages` new messages of
an open conversation and once more when the conversation closes, so what was said is in the
graph during a long conversation, at one model call per several exchanges, not per turn.

Malformed items degrade, they never fail the extraction: a nameless entity or a relation
without a type is dropped and counted; a failed model call is logged and stores nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, Field

from persyn.core.config import Task
from persyn.core.errors import InputError, ModelError
from persyn.core.records import Sensitivity, channel_key
from persyn.gateway.base import Completion, Prompt, UserTurn
from persyn.store.base import Conversation, Message, Role
from persyn.store.capabilities import GraphStore
from persyn.store.ports.graph_rows import (
    EntityFact,
    FactSource,
    GraphWrite,
    RelationFact,
    entity_key,
    relation_label,
)
from persyn.store.unread import WatermarkReader

__all__ = [
    "GRAPH_READER",
    "TRANSCRIPT_HEADING",
    "Attribute",
    "Entity",
    "GraphExtraction",
    "GraphExtractor",
    "Outcome",
    "Relation",
]

log = logging.getLogger(__name__)

TRANSCRIPT_HEADING = "The conversation, for the knowledge graph:"
GRAPH_READER = "graph"  # its watermarks (store/unread.py)
SENSITIVITY_FLAG = "graph-sensitivity:"  # + conversation id: the highest judged so far


class _Gateway(Protocol):
    async def complete(
        self, task: Task, prompt: Prompt, *, output: type[BaseModel] | None = None, stage: str | None = None
    ) -> Completion: ...


class Attribute(BaseModel):
    name: str = Field(description="e.g. 'city', 'founded', 'role'")
    value: str


class Entity(BaseModel):
    name: str = Field(description="its proper name as said, e.g. 'Acme Corp', 'Lisbon', 'Ann'")
    kind: str = Field(
        default="thing", description="person, organisation, place, project, pet, event, thing, ..."
    )
    attributes: list[Attribute] = Field(default_factory=list[Attribute])


class Relation(BaseModel):
    source: str = Field(description="an entity name")
    relation: str = Field(description="a short verb phrase: works at, lives in, sister of, owns, ...")
    target: str = Field(description="an entity name")


class GraphExtraction(BaseModel):
    entities: list[Entity] = Field(default_factory=list[Entity])
    relations: list[Relation] = Field(default_factory=list[Relation])
    sensitivity: Sensitivity = Field(
        default=Sensitivity.PRIVATE,
        description="public: common knowledge anyone may hear; private: said among these people; "
        "confidential: told in confidence; restricted: only for exactly these people",
    )


_INSTRUCTION = """\
You build {agent}'s knowledge graph from a conversation {agent} took part in. List the
specific entities it mentions (people, organisations, places, projects, pets, events, things
with proper names) and the relations stated or clearly implied between them, each as
source - relation - target with a short verb phrase ("works at", "lives in", "sister of").
Use the names as said; refer to {agent} by name. Only facts, no guesses, no small talk.
Lines under "(Earlier, already read:)" are context only: take nothing from them, only from
the lines under "(New:)". Return empty lists when there is nothing worth keeping. Choose the
sensitivity of these facts."""


@dataclass
class Outcome:
    written: GraphWrite | None = None
    dropped: list[str] = field(default_factory=list[str])
    failure: str | None = None


class GraphExtractor:
    """Extracts one conversation's entities and relations into the store."""

    def __init__(self, store: GraphStore, gateway: _Gateway, agent_name: str) -> None:
        self.store = store
        self.gateway = gateway
        self.agent_name = agent_name
        self._reader = WatermarkReader(store, GRAPH_READER)

    async def pending(self, agent_id: str, conversation: Conversation) -> int:
        """Messages of the conversation not yet extracted."""
        return len((await self._reader.unread(agent_id, conversation)).fresh)

    async def extract(self, agent_id: str, conversation: Conversation, default: Sensitivity) -> Outcome:
        """Extract what was said since the last extraction of this conversation; the
        watermark moves only once the facts are stored (a failed call is retried next time)."""
        unread = await self._reader.unread(agent_id, conversation)
        fresh, context = unread.fresh, unread.context
        if not any(m.role is Role.USER for m in fresh):
            if fresh:
                await self._reader.advance(agent_id, conversation.id, fresh[-1])
            return Outcome()
        text = self._lines(fresh)
        if context:
            text = f"(Earlier, already read:)\n{self._lines(context)}\n(New:)\n{text}"
        prompt = Prompt(
            system=_INSTRUCTION.format(agent=self.agent_name),
            items=(UserTurn(text=f"{TRANSCRIPT_HEADING}\n{text}"),),
        )
        try:
            completion = await self.gateway.complete(
                Task.EXTRACT, prompt, output=GraphExtraction, stage="graph"
            )
        except ModelError as exc:
            log.warning("graph extraction for %s failed: %s", conversation.id, exc)
            return Outcome(failure=str(exc))
        extraction = completion.output
        if not isinstance(extraction, GraphExtraction):  # pragma: no cover - the gateway validates
            return Outcome(failure="the model returned no extraction")
        entities, relations, dropped = _clean(extraction)
        if not entities and not relations:
            await self._reader.advance(agent_id, conversation.id, fresh[-1])
            return Outcome(dropped=dropped)
        # The model may raise the channel's default, never lower it; and a conversation read in
        # parts never gets less sensitive than an earlier part was judged (a confidence told
        # early stays one when a later part is small talk).
        floor = await self._floor(agent_id, conversation.id, default)
        sensitivity = extraction.sensitivity if extraction.sensitivity.rank > floor.rank else floor
        if sensitivity is not floor:
            await self.store.set_flag(agent_id, SENSITIVITY_FLAG + conversation.id, sensitivity.value)
        source = FactSource(
            channel=channel_key(conversation.service, conversation.channel),
            participant_ids=tuple(p for p in conversation.participant_ids if p != agent_id),
            sensitivity=sensitivity,
            conversation_id=conversation.id,
            learned_at=conversation.last_activity_at,
        )
        written = await self.store.upsert_graph(agent_id, source, entities, relations)
        await self._reader.advance(agent_id, conversation.id, fresh[-1])
        return Outcome(written=written, dropped=dropped)

    async def _floor(self, agent_id: str, conversation_id: str, default: Sensitivity) -> Sensitivity:
        raw = await self.store.get_flag(agent_id, SENSITIVITY_FLAG + conversation_id)
        try:
            earlier = Sensitivity(raw) if raw else default
        except ValueError:
            earlier = default
        return earlier if earlier.rank > default.rank else default

    def _lines(self, messages: list[Message]) -> str:
        return "\n".join(
            f"{self.agent_name if m.role is Role.AGENT else m.speaker_name}: {m.text}" for m in messages
        )


def _clean(extraction: GraphExtraction) -> tuple[list[EntityFact], list[RelationFact], list[str]]:
    """What the store will accept; anything else is dropped with the reason."""
    entities: list[EntityFact] = []
    relations: list[RelationFact] = []
    dropped: list[str] = []
    for entity in extraction.entities:
        try:
            entity_key(entity.name)
        except InputError as exc:
            dropped.append(str(exc))
            continue
        attributes = {
            a.name.strip(): a.value.strip() for a in entity.attributes if a.name.strip() and a.value.strip()
        }
        entities.append(
            EntityFact(name=entity.name, kind=entity.kind.strip().lower() or "thing", attributes=attributes)
        )
    for relation in extraction.relations:
        try:
            source, target = entity_key(relation.source), entity_key(relation.target)
            relation_label(relation.relation)
        except InputError as exc:
            dropped.append(str(exc))
            continue
        if source == target:
            dropped.append(f"relation {relation.relation!r} links {relation.source!r} to itself")
            continue
        relations.append(
            RelationFact(source=relation.source, relation=relation.relation, target=relation.target)
        )
    return entities, relations, dropped
