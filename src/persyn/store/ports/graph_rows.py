"""Row types of the knowledge graph port (SPEC §4.3), shared by every backend and by `graph/`.

A graph *fact* is either a mention (the agent learned that an entity exists, with some
attributes) or a relation (a typed edge between two entities). Every fact keeps where it was
learned — `FactSource`: the compartment (channel), its sensitivity and the people present —
and surfaces only where a memory with that provenance would (`memory/access.py`): a
`GraphView` describes the situation a query is made in, and a backend answers only with
facts visible in it. A view of `None` is the operator's: everything.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import InputError
from persyn.core.records import Sensitivity
from persyn.store.rows import ulid

__all__ = [
    "MAX_NAME",
    "EntityFact",
    "FactSource",
    "GraphEntity",
    "GraphRelation",
    "GraphView",
    "GraphWrite",
    "RelationFact",
    "Subgraph",
    "entity_key",
    "relation_label",
]

MAX_NAME = 200
_SPACE = re.compile(r"\s+")
_EDGE_PUNCTUATION = " \t\"'`.,;:!?()[]{}<>*_-"
_LABEL = re.compile(r"[^a-z0-9]+")


def entity_key(name: str) -> str:
    """The normalised name an entity is known by: case-folded, whitespace collapsed,
    surrounding punctuation and a leading "the " before two or more words dropped — "The  Acme
    Corp." and "acme corp" are one entity. An empty or over-long name is an InputError."""
    folded = _SPACE.sub(" ", unicodedata.normalize("NFKC", name).casefold()).strip(_EDGE_PUNCTUATION)
    # "The Acme Corp." is "acme corp", but "The Who" stays "the who": a one-word remainder
    # would collide with a common word ("who", "office") in every input.
    if folded.startswith("the ") and " " in folded[4:].strip(_EDGE_PUNCTUATION):
        folded = folded[4:].strip(_EDGE_PUNCTUATION)
    if not folded:
        raise InputError(f"entity name {name!r} is empty once normalised")
    if len(folded) > MAX_NAME:
        raise InputError(f"entity name {name[:40]!r}... is longer than {MAX_NAME} characters")
    return folded


def relation_label(relation: str) -> str:
    """A relation type as stored: lower-case words joined by "_" ("Works at" → "works_at")."""
    label = _LABEL.sub("_", unicodedata.normalize("NFKC", relation).casefold()).strip("_")
    if not label:
        raise InputError(f"relation {relation!r} has no letters or digits")
    return label[:100]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class FactSource(_Row):
    """Where and with whom facts were learned: the provenance every fact carries."""

    channel: str  # channel_key(service, channel)
    participant_ids: tuple[Annotated[str, ulid("participant id")], ...] = ()  # the agent excluded
    sensitivity: Sensitivity = Sensitivity.PRIVATE
    conversation_id: Annotated[str, ulid("conversation id")] | None = None
    learned_at: datetime


class EntityFact(_Row):
    name: str
    kind: str = "thing"
    attributes: dict[str, str] = Field(default_factory=dict[str, str])


class RelationFact(_Row):
    source: str  # entity names; unknown ones are created
    relation: str
    target: str


class GraphView(_Row):
    """The situation a graph query is made in (the same inputs as `memory.access.may_surface`)."""

    channel: str  # the current channel_key
    eligible: tuple[str, ...]  # its compartment: itself and the channels grouped with it
    present: tuple[str, ...] = ()  # who can read the channel now, the agent itself excluded


class GraphEntity(_Row):
    id: str
    name: str
    kind: str
    attributes: dict[str, str] = Field(default_factory=dict[str, str])
    depth: int = 0  # hops from the entities a neighbourhood query started at


class GraphRelation(_Row):
    id: str
    source_id: str
    source: str
    relation: str
    target_id: str
    target: str
    channel: str
    sensitivity: Sensitivity
    conversation_id: str | None
    learned_at: datetime

    def line(self) -> str:
        return f"{self.source} —{self.relation.replace('_', ' ')}→ {self.target}"


class Subgraph(_Row):
    entities: tuple[GraphEntity, ...] = ()
    relations: tuple[GraphRelation, ...] = ()


class GraphWrite(_Row):
    """What an upsert changed: new rows, and facts learned again (refreshed, not duplicated)."""

    entities_added: int = 0
    mentions_added: int = 0
    relations_added: int = 0
    refreshed: int = 0
