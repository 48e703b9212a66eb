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
from persyn.memory.access import eligible_channels
from persyn.ops.history import opened_store
from persyn.store.base import Store
from persyn.store.capabilities import command_capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphEntity, GraphRelation, GraphView, Subgraph, entity_key

__all__ = ["GraphPath", "GraphQuery", "graph_path", "graph_query", "graph_stats", "view_for"]


@dataclass(frozen=True)
class GraphQuery:
    entity: GraphEntity
    around: Subgraph


@dataclass(frozen=True)
class GraphPath:
    source: GraphEntity
    target: GraphEntity
    relations: list[GraphRelation] | None  # None: not connected within the bound


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
