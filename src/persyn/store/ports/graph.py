"""The knowledge-graph sub-port (SPEC §4.3); its row types are in `graph_rows.py` (`graph/`
imports them without the port)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from persyn.store.ports.graph_rows import (
    EntityFact,
    FactSource,
    GraphEntity,
    GraphRelation,
    GraphView,
    GraphWrite,
    RelationFact,
    Subgraph,
)

__all__ = ["GraphPort"]


class GraphPort(ABC):
    """Entities and relations the agent learned, with provenance."""

    @abstractmethod
    async def upsert_graph(
        self,
        agent_id: str,
        source: FactSource,
        entities: Sequence[EntityFact],
        relations: Sequence[RelationFact],
    ) -> GraphWrite:
        """Store what was learned, in one transaction, without duplicates: an entity is found
        by its normalised name (`entity_key`); a mention or relation learned again with the
        same provenance (channel, sensitivity, people present) is refreshed, not repeated.
        The endpoints of a relation get mentions with the same provenance, so a visible
        relation never points at an invisible entity. Bad names are an InputError and
        nothing is stored."""

    @abstractmethod
    async def graph_entities(
        self, agent_id: str, keys: Sequence[str], view: GraphView | None
    ) -> list[GraphEntity]:
        """Entities whose normalised name is one of `keys` and that are visible in `view`,
        with the attributes learned where they are visible."""

    @abstractmethod
    async def search_entities(
        self, agent_id: str, fragment: str, view: GraphView | None, limit: int = 20
    ) -> list[GraphEntity]:
        """Visible entities whose normalised name contains `fragment`, shortest name first."""

    @abstractmethod
    async def graph_neighbourhood(
        self,
        agent_id: str,
        entity_ids: Sequence[str],
        hops: int,
        view: GraphView | None,
        limit: int = 50,
    ) -> Subgraph:
        """Everything within `hops` visible relations of `entity_ids` (a recursive query over
        visible relations only: a hidden relation is never a bridge), nearest first; at most
        `limit` relations."""

    @abstractmethod
    async def conversation_entities(
        self, agent_id: str, conversation_ids: Sequence[str], view: GraphView | None, limit: int = 50
    ) -> list[GraphEntity]:
        """Entities with a visible mention or an end of a visible relation last learned in one
        of `conversation_ids` (a fact learned again elsewhere moves there), by name; at most
        `limit`. What the graph links a conversation's memories to."""

    @abstractmethod
    async def graph_path(
        self, agent_id: str, source_id: str, target_id: str, view: GraphView | None, max_hops: int
    ) -> list[GraphRelation] | None:
        """A shortest chain of visible relations from one entity to another (either
        direction), or None when there is none within `max_hops`."""

    @abstractmethod
    async def graph_stats(self, agent_id: str) -> dict[str, int]:
        """Counts of entities, mentions and relations."""
