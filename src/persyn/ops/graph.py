"""The knowledge graph as the operator browses it (`persyn graph query|path|stats`).

The operator sees every fact with its provenance; `channel` narrows the view to what the
agent itself could bring up on that channel with nobody else present (its compartment and
sensitivity rules), which is how an operator checks that a private fact stays private.
"""

from __future__ import annotations

from dataclasses import dataclass

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import is_id
from persyn.core.records import MemoryRecord
from persyn.graph.recall import neighbours
from persyn.memory.access import eligible_channels, may_surface
from persyn.ops.history import opened_store
from persyn.store.base import Store
from persyn.store.capabilities import MemoryStore, capability, command_capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphEntity, GraphRelation, GraphView, Subgraph, entity_key

__all__ = [
    "GraphPath",
    "GraphQuery",
    "MemoryNeighbours",
    "graph_path",
    "graph_query",
    "graph_stats",
    "memory_neighbours",
    "view_for",
]

_RELATED_ENTITIES = 5  # entities whose other memories a memory's neighbours list
_RELATED_HITS = 10  # keyword hits read per entity name


@dataclass(frozen=True)
class GraphQuery:
    entity: GraphEntity
    around: Subgraph


@dataclass(frozen=True)
class GraphPath:
    source: GraphEntity
    target: GraphEntity
    relations: list[GraphRelation] | None  # None: not connected within the bound


@dataclass(frozen=True)
class MemoryNeighbours:
    """What the graph links a memory to: the entities its conversation taught or its text
    names, the relations one hop around them, and other memories naming those entities."""

    entities: tuple[GraphEntity, ...]
    relations: tuple[GraphRelation, ...]
    memories: tuple[MemoryRecord, ...]


def view_for(settings: Settings, channel: str | None) -> GraphView | None:
    if channel is None:
        return None
    if ":" not in channel:
        raise InputError(f"channel {channel!r} must be SERVICE:CHANNEL, as `persyn channels list` prints it")
    return GraphView(channel=channel, eligible=eligible_channels(channel, settings.memory.channel_groups))


def _graph(store: Store) -> GraphPort:
    return command_capability(store, GraphPort)


async def _resolve(store: GraphPort, agent: AgentConfig, name: str, view: GraphView | None) -> GraphEntity:
    """An entity by exact (normalised) name, by id, or by a fragment naming exactly one."""
    if is_id(name.strip().upper()):
        found = await store.graph_neighbourhood(agent.id, [name.strip().upper()], 0, view)
        if found.entities:
            return found.entities[0]
    key = entity_key(name)
    exact = await store.graph_entities(agent.id, [key], view)
    if exact:
        return exact[0]
    similar = await store.search_entities(agent.id, name, view, limit=10)
    if len(similar) == 1:
        return similar[0]
    if similar:
        names = ", ".join(repr(e.name) for e in similar)
        raise InputError(f"{name!r} names more than one entity: {names}; say which")
    counts = await store.graph_stats(agent.id)
    raise InputError(
        f"agent {agent.name} knows no entity named {name!r} "
        f"({counts['entities']} entities in its graph{'' if view is None else ' (all channels)'})"
    )


async def graph_query(
    settings: Settings, agent: AgentConfig, name: str, hops: int, limit: int, channel: str | None = None
) -> GraphQuery:
    if not 1 <= hops <= 6:
        raise InputError(f"--hops must be between 1 and 6, not {hops}")
    view = view_for(settings, channel)
    async with opened_store(settings) as opened:
        store = _graph(opened)
        entity = await _resolve(store, agent, name, view)
        around = await store.graph_neighbourhood(agent.id, [entity.id], hops, view, limit)
    return GraphQuery(entity=entity, around=around)


async def graph_path(
    settings: Settings, agent: AgentConfig, a: str, b: str, max_hops: int, channel: str | None = None
) -> GraphPath:
    if not 1 <= max_hops <= 6:
        raise InputError(f"--max-hops must be between 1 and 6, not {max_hops}")
    view = view_for(settings, channel)
    async with opened_store(settings) as opened:
        store = _graph(opened)
        source = await _resolve(store, agent, a, view)
        target = await _resolve(store, agent, b, view)
        relations = await store.graph_path(agent.id, source.id, target.id, view, max_hops)
    return GraphPath(source=source, target=target, relations=relations)


async def graph_stats(settings: Settings, agent: AgentConfig) -> dict[str, int]:
    async with opened_store(settings) as opened:
        return await _graph(opened).graph_stats(agent.id)


async def memory_neighbours(
    settings: Settings, agent_id: str, store: MemoryStore, record: MemoryRecord
) -> MemoryNeighbours | None:
    """`record`'s graph neighbours (None on a store without a graph), all read in the
    memory's own situation — its channel, before the people it was formed with — so nothing
    shows beside a memory that could not surface with it (`memory.access.may_surface`)."""
    graph = capability(store, GraphPort)
    if graph is None:
        return None
    groups = settings.memory.channel_groups
    present = tuple(p for p in record.participant_ids if p != agent_id)
    view = GraphView(
        channel=record.channel, eligible=eligible_channels(record.channel, groups), present=present
    )
    linked = await neighbours(graph, agent_id, record.summary, record.conversation_id, view)
    related: dict[str, MemoryRecord] = {}
    for entity in linked.mentioned[:_RELATED_ENTITIES]:
        hits = await store.keyword_candidates(agent_id, entity.name, _RELATED_HITS, None)
        for other in await store.records_by_ids(agent_id, [i for i, _ in hits if i != record.id]):
            if may_surface(other, record.channel, present, groups, agent_id=agent_id):
                related.setdefault(other.id, other)
    return MemoryNeighbours(
        entities=linked.mentioned,
        relations=linked.relations,
        memories=tuple(sorted(related.values(), key=lambda r: r.id, reverse=True)),
    )
