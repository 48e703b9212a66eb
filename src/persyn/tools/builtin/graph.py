"""`query_graph` (SPEC §4.6): what the knowledge graph holds around an entity, or how two
entities are connected — read through the same `GraphView` as the graph context of a turn
(the current channel, its compartment under `[memory] channel_groups`, the people present),
so the tool never shows a fact the prompt's graph section would withhold, and a hidden fact
is never a bridge on a path (the store's recursive queries walk visible relations only).

An entity is found by its name, or by a fragment naming exactly one visible entity; one that
is not visible here is reported exactly like one that does not exist, so the answer does not
tell a stranger that something is known elsewhere. What is shown is reported to `read`, which
narrows a self-initiated run's provenance like any other read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import InputError, ToolError
from persyn.core.records import Sensitivity
from persyn.store.base import Provenance
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphEntity, GraphRelation, GraphView, entity_key
from persyn.tools.registry import Tool

__all__ = ["GraphToolsContext", "graph_tools"]


@dataclass(frozen=True)
class GraphToolsContext:
    store: GraphPort
    agent_id: str
    view: GraphView  # this activation's: its channel, compartment and the people present
    read: Callable[[Sequence[Provenance]], Awaitable[None]]
    max_relations: int = 40
    max_path_hops: int = 4


class GraphQueryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entity: str = Field(
        min_length=1, max_length=200, description="The entity's name (or a unique part of it)."
    )
    other: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="A second entity: give the shortest chain of relations between the two instead.",
    )
    hops: int = Field(default=1, ge=1, le=3, description="How many relations out from the entity to follow.")


class GraphEntityOutput(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    attributes: dict[str, str] = Field(default_factory=dict[str, str])


class GraphQueryOutput(BaseModel):
    model_config = ConfigDict(frozen=True)

    entity: GraphEntityOutput
    other: GraphEntityOutput | None = None
    relations: list[str] = Field(default_factory=list[str])  # "source —relation→ target", nearest first
    connected: bool | None = None  # with `other`: whether a chain was found


def graph_tools(context: GraphToolsContext) -> list[Tool[GraphQueryInput, GraphQueryOutput]]:
    async def query_graph(arguments: GraphQueryInput) -> GraphQueryOutput:
        view, store, agent = context.view, context.store, context.agent_id
        entity = await _resolve(store, agent, arguments.entity, view)
        if arguments.other is None:
            around = await store.graph_neighbourhood(
                agent, [entity.id], arguments.hops, view, context.max_relations
            )
            shown = next((e for e in around.entities if e.id == entity.id), entity)
            await context.read(_provenance(around.relations, (shown,), view.channel))
            return GraphQueryOutput(entity=_out(shown), relations=[r.line() for r in around.relations])
        other = await _resolve(store, agent, arguments.other, view)
        path = await store.graph_path(agent, entity.id, other.id, view, context.max_path_hops) or []
        await context.read(_provenance(path, (entity, other), view.channel))
        return GraphQueryOutput(
            entity=_out(entity), other=_out(other), relations=[r.line() for r in path], connected=bool(path)
        )

    return [
        Tool(
            name="query_graph",
            description=(
                "Look up what I know of an entity (a person, place, thing) in my knowledge graph: its "
                "relations within `hops`; or, with `other`, how two entities are connected."
            ),
            input_model=GraphQueryInput,
            output_model=GraphQueryOutput,
            handler=query_graph,
        )
    ]


async def _resolve(store: GraphPort, agent_id: str, name: str, view: GraphView) -> GraphEntity:
    try:
        key = entity_key(name)
    except InputError as exc:
        raise ToolError(f"{name!r} is not an entity name: {exc}") from exc
    exact = await store.graph_entities(agent_id, [key], view)
    if exact:
        return exact[0]
    similar = await store.search_entities(agent_id, name, view, limit=10)
    if len(similar) == 1:
        return similar[0]
    if similar:
        names = ", ".join(repr(e.name) for e in similar)
        raise ToolError(f"{name!r} could be any of {names}; ask again with the full name")
    raise ToolError(f"I know of no entity named {name!r} here")


def _out(entity: GraphEntity) -> GraphEntityOutput:
    return GraphEntityOutput(name=entity.name, kind=entity.kind, attributes=dict(entity.attributes))


def _provenance(
    relations: Sequence[GraphRelation], entities: Sequence[GraphEntity], home: str
) -> list[Provenance]:
    """Where what is shown may surface, as the graph context counts it: a relation's row keeps
    no participants, so as formed with nobody; attributes as this channel's, private."""
    read = [Provenance(channel=r.channel, sensitivity=r.sensitivity) for r in relations]
    if any(entity.attributes for entity in entities):
        read.append(Provenance(channel=home, sensitivity=Sensitivity.PRIVATE))
    return read
