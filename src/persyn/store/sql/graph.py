"""The knowledge graph (SPEC §4.3): the `Store` methods over `graph_entities`,
`graph_mentions`, `graph_relations`, `graph_links` and `graph_fact_participants` (migration 7).

Traversal is a recursive CTE over *visible* relations only, so a relation the current view
may not see is never a bridge to what lies behind it. Everything here is SQLAlchemy Core
without SQLite-only syntax (no `instr`, no JSON functions in queries), so a PostgreSQL backend
can reuse the statements as they are.

Visibility (`_visible`) is `memory.access.may_surface` written as SQL over a fact's
provenance columns; persyn/testing/store_contract/graph.py checks the two agree on every
combination.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Integer,
    Table,
    and_,
    bindparam,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    union,
)
from sqlalchemy.engine import Connection

from persyn.core.errors import InputError
from persyn.core.records import Sensitivity
from persyn.store.ports.graph_rows import (
    EntityFact,
    FactSource,
    GraphEntity,
    GraphRelation,
    GraphView,
    GraphWrite,
    RelationFact,
    Subgraph,
    entity_key,
)
from persyn.store.schema.graph import (
    graph_entities,
    graph_fact_participants,
    graph_links,
    graph_mentions,
    graph_relations,
)
from persyn.store.sql.graph_write import plan_graph_write, upsert_graph_rows
from persyn.store.sql.work import SqlWork

__all__ = ["SqlGraph"]

T = TypeVar("T")

_MAX_HOPS = 6
_MAX_STARTS = 50
_MAX_KEYS = 500

_e = graph_entities.c
_m = graph_mentions.c
_r = graph_relations.c
_p = graph_fact_participants.c
_l = graph_links.c

_SQL_ANY_KEY = (
    select(_e.id)
    .where(_e.agent_id == bindparam("p_agent_id"), _e.key.in_(bindparam("p_keys", expanding=True)))
    .limit(1)
)


class SqlGraph(SqlWork):
    """The knowledge-graph part of `SQLiteStore`."""

    async def upsert_graph(
        self,
        agent_id: str,
        source: FactSource,
        entities: Sequence[EntityFact],
        relations: Sequence[RelationFact],
    ) -> GraphWrite:
        plan = plan_graph_write(source, entities, relations)  # every InputError before anything is written
        return await self._write("upsert_graph", lambda c: upsert_graph_rows(c, agent_id, source, plan))

    async def graph_entities(
        self, agent_id: str, keys: Sequence[str], view: GraphView | None
    ) -> list[GraphEntity]:
        wanted = list(dict.fromkeys(keys))[:_MAX_KEYS]
        if not wanted:
            return []

        def work(connection: Connection) -> list[GraphEntity]:
            # Most turns name no known entity: a cheap prebuilt probe first, so the
            # visibility predicate (built per view) is only built when something matches.
            if connection.execute(_SQL_ANY_KEY, {"p_agent_id": agent_id, "p_keys": wanted}).first() is None:
                return []
            statement = (
                select(_e.id, _e.name)
                .where(_e.agent_id == agent_id, _e.key.in_(wanted), _mentioned(agent_id, view))
                .order_by(_e.key)
            )
            return _with_attributes(connection, agent_id, connection.execute(statement).all(), view)

        return await self._read("graph_entities", work)

    async def search_entities(
        self, agent_id: str, fragment: str, view: GraphView | None, limit: int = 20
    ) -> list[GraphEntity]:
        needle = entity_key(fragment)
        pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

        def work(connection: Connection) -> list[GraphEntity]:
            statement = (
                select(_e.id, _e.name)
                .where(_e.agent_id == agent_id, _e.key.like(pattern, escape="\\"), _mentioned(agent_id, view))
                .order_by(func.length(_e.key), _e.key)
                .limit(max(1, limit))
            )
            return _with_attributes(connection, agent_id, connection.execute(statement).all(), view)

        return await self._read("search_entities", work)

    async def graph_neighbourhood(
        self,
        agent_id: str,
        entity_ids: Sequence[str],
        hops: int,
        view: GraphView | None,
        limit: int = 50,
    ) -> Subgraph:
        if not 0 <= hops <= _MAX_HOPS:
            raise InputError(f"hops must be between 0 and {_MAX_HOPS}, not {hops}")
        starts = list(dict.fromkeys(entity_ids))[:_MAX_STARTS]
        if not starts:
            return Subgraph()

        def work(connection: Connection) -> Subgraph:
            depth = _distances(connection, agent_id, starts, hops, view)
            if not depth:
                return Subgraph()
            found = _relations_near(connection, agent_id, depth, view, limit)
            shown = (
                {i for i in starts if i in depth}
                | {r.source_id for r in found}
                | {r.target_id for r in found}
            )
            rows = connection.execute(
                select(_e.id, _e.name).where(_e.agent_id == agent_id, _e.id.in_(shown))
            ).all()
            entities = _with_attributes(connection, agent_id, rows, view)
            entities = sorted(
                (e.model_copy(update={"depth": depth[e.id]}) for e in entities),
                key=lambda e: (e.depth, e.name),
            )
            return Subgraph(entities=tuple(entities), relations=tuple(found))

        return await self._read("graph_neighbourhood", work)

    async def conversation_entities(
        self, agent_id: str, conversation_ids: Sequence[str], view: GraphView | None, limit: int = 50
    ) -> list[GraphEntity]:
        wanted = list(dict.fromkeys(conversation_ids))[:_MAX_KEYS]
        if not wanted or limit < 1:
            return []

        def work(connection: Connection) -> list[GraphEntity]:
            ends = [
                select(_m.entity_id.label("entity_id")).where(
                    _m.agent_id == agent_id, _m.conversation_id.in_(wanted), _visible(graph_mentions, view)
                ),
                *(
                    select(end.label("entity_id")).where(
                        _r.agent_id == agent_id,
                        _r.conversation_id.in_(wanted),
                        _visible(graph_relations, view),
                    )
                    for end in (_r.source_id, _r.target_id)
                ),
            ]
            linked = union(*ends).subquery()
            statement = (
                select(_e.id, _e.name)
                .where(_e.agent_id == agent_id, _e.id.in_(select(linked.c.entity_id)))
                .order_by(_e.key)
                .limit(limit)
            )
            return _with_attributes(connection, agent_id, connection.execute(statement).all(), view)

        return await self._read("conversation_entities", work)

    async def graph_path(
        self, agent_id: str, source_id: str, target_id: str, view: GraphView | None, max_hops: int
    ) -> list[GraphRelation] | None:
        if not 1 <= max_hops <= _MAX_HOPS:
            raise InputError(f"max_hops must be between 1 and {_MAX_HOPS}, not {max_hops}")

        def work(connection: Connection) -> list[GraphRelation] | None:
            # Bidirectional: a ball of half the radius around each end, met in the middle,
            # costs two small walks instead of one wide one (a hub's fan-out squared, not
            # to the fourth).
            if source_id == target_id:
                return [] if _distances(connection, agent_id, [source_id], 0, view) else None
            near = _distances(connection, agent_id, [source_id], (max_hops + 1) // 2, view)
            far = _distances(connection, agent_id, [target_id], max_hops // 2, view)
            meeting = [(near[m] + far[m], m) for m in near.keys() & far.keys()]
            if not meeting:
                return None
            _, middle = min(meeting)
            first = _walk_back(connection, agent_id, near, middle, view)
            second = _walk_back(connection, agent_id, far, middle, view)
            if first is None or second is None:  # pragma: no cover - distances always lead back
                return None
            return list(reversed(first)) + second

        return await self._read("graph_path", work)

    async def graph_stats(self, agent_id: str) -> dict[str, int]:
        def work(connection: Connection) -> dict[str, int]:
            counts: dict[str, int] = {}
            for name, table in (
                ("entities", graph_entities),
                ("mentions", graph_mentions),
                ("relations", graph_relations),
            ):
                counts[name] = int(
                    connection.scalar(
                        select(func.count()).select_from(table).where(table.c.agent_id == agent_id)
                    )
                    or 0
                )
            return counts

        return await self._read("graph_stats", work)


def _walk_back(
    connection: Connection, agent_id: str, depth: dict[str, int], here: str, view: GraphView | None
) -> list[GraphRelation] | None:
    """Relations from `here` back to the walk's start, following strictly decreasing
    distances (the lowest relation id wins a tie, so a path is reproducible)."""
    path: list[GraphRelation] = []
    while depth[here] > 0:
        around = _relations_touching(connection, agent_id, here, view)
        before = [r for r in around if depth.get(_other(r, here), -1) == depth[here] - 1]
        if not before:
            return None
        step = min(before, key=lambda r: r.id)
        path.append(step)
        here = _other(step, here)
    return path


def _other(relation: GraphRelation, entity_id: str) -> str:
    return relation.target_id if relation.source_id == entity_id else relation.source_id


# visibility -----------------------------------------------------------------------------------
def _visible(table: Table, view: GraphView | None) -> ColumnElement[bool]:
    """`memory.access.may_surface` over a fact's provenance, as SQL (see that module)."""
    if view is None:
        return true()
    present = sorted(set(view.present))
    fact = table.c
    in_fact = and_(_p.agent_id == fact.agent_id, _p.fact_id == fact.id)
    covered: ColumnElement[bool] = (
        select(func.count()).where(in_fact, _p.person_id.in_(present)).scalar_subquery() == len(present)
        if present
        else true()
    )
    everyone = select(func.count()).where(in_fact).scalar_subquery() == len(present)
    here = fact.channel == view.channel
    return and_(
        fact.channel.in_(view.eligible),
        or_(
            fact.sensitivity == Sensitivity.PUBLIC.value,
            and_(
                covered,
                or_(
                    fact.sensitivity == Sensitivity.PRIVATE.value,
                    and_(
                        here,
                        or_(
                            fact.sensitivity == Sensitivity.CONFIDENTIAL.value,
                            and_(fact.sensitivity == Sensitivity.RESTRICTED.value, everyone),
                        ),
                    ),
                ),
            ),
        ),
    )


def _mentioned(agent_id: str, view: GraphView | None) -> ColumnElement[bool]:
    """The entity has at least one mention visible in `view`."""
    if view is None:
        return true()
    return exists(
        select(_m.id).where(_m.agent_id == agent_id, _m.entity_id == _e.id, _visible(graph_mentions, view))
    )


# reads ----------------------------------------------------------------------------------------
def _distances(
    connection: Connection, agent_id: str, starts: Sequence[str], hops: int, view: GraphView | None
) -> dict[str, int]:
    """Entity id -> fewest visible relations from any start (a recursive CTE; UNION keeps one
    row per (entity, depth), so it ends after `hops` rounds on any graph, cycles included)."""
    walk = (
        select(_e.id.label("node"), literal(0, Integer).label("depth"))
        .where(_e.agent_id == agent_id, _e.id.in_(list(starts)), _mentioned(agent_id, view))
        .cte("walk", recursive=True)
    )
    step = (
        select(_l.to_id, walk.c.depth + 1)
        .select_from(walk)
        .join(graph_links, and_(_l.agent_id == agent_id, _l.from_id == walk.c.node))
        .join(graph_relations, _r.id == _l.relation_id)
        .where(walk.c.depth < hops, _visible(graph_relations, view))
    )
    walk = walk.union(step)
    rows = connection.execute(select(walk.c.node, func.min(walk.c.depth)).group_by(walk.c.node)).all()
    return {str(node): int(depth) for node, depth in rows}


def _relation_query(agent_id: str, view: GraphView | None) -> Any:
    source = graph_entities.alias("source")
    target = graph_entities.alias("target")
    return (
        select(
            _r.id,
            _r.source_id,
            source.c.name.label("source_name"),
            _r.relation,
            _r.target_id,
            target.c.name.label("target_name"),
            _r.channel,
            _r.sensitivity,
            _r.conversation_id,
            _r.learned_at,
        )
        .join(source, and_(source.c.agent_id == _r.agent_id, source.c.id == _r.source_id))
        .join(target, and_(target.c.agent_id == _r.agent_id, target.c.id == _r.target_id))
        .where(_r.agent_id == agent_id, _visible(graph_relations, view))
    )


def _relation_from_row(row: Any) -> GraphRelation:
    return GraphRelation(
        id=row.id,
        source_id=row.source_id,
        source=row.source_name,
        relation=row.relation,
        target_id=row.target_id,
        target=row.target_name,
        channel=row.channel,
        sensitivity=Sensitivity(row.sensitivity),
        conversation_id=row.conversation_id,
        learned_at=row.learned_at,
    )


def _relations_near(
    connection: Connection, agent_id: str, depth: dict[str, int], view: GraphView | None, limit: int
) -> list[GraphRelation]:
    """Visible relations among the reached entities, nearest first: ring by ring outward
    from the starts, stopping once `limit` are found (a hub's far side is never loaded)."""
    found: dict[str, GraphRelation] = {}
    for ring in range(max(depth.values(), default=-1) + 1):
        if len(found) >= limit:
            break
        ids = sorted(entity for entity, d in depth.items() if d == ring)
        wanted: set[str] = set()
        for at in range(0, len(ids), _MAX_KEYS):
            links = select(_l.relation_id, _l.to_id).where(
                _l.agent_id == agent_id, _l.from_id.in_(ids[at : at + _MAX_KEYS])
            )
            wanted.update(r for r, to in connection.execute(links).all() if to in depth and r not in found)
        ring_relations = _relations_by_id(connection, agent_id, sorted(wanted), view)
        ring_relations.sort(key=lambda r: (-r.learned_at.timestamp(), r.id))  # newest first within a ring
        for relation in ring_relations:
            found.setdefault(relation.id, relation)
    return list(found.values())[: max(0, limit)]


def _relations_touching(
    connection: Connection, agent_id: str, entity_id: str, view: GraphView | None
) -> list[GraphRelation]:
    links = select(_l.relation_id).where(_l.agent_id == agent_id, _l.from_id == entity_id)
    return _relations_by_id(connection, agent_id, sorted(connection.execute(links).scalars()), view)


def _relations_by_id(
    connection: Connection, agent_id: str, ids: list[str], view: GraphView | None
) -> list[GraphRelation]:
    found: list[GraphRelation] = []
    for at in range(0, len(ids), _MAX_KEYS):
        statement = _relation_query(agent_id, view).where(_r.id.in_(ids[at : at + _MAX_KEYS]))
        found.extend(_relation_from_row(row) for row in connection.execute(statement).all())
    return found


def _with_attributes(
    connection: Connection, agent_id: str, rows: Sequence[Any], view: GraphView | None
) -> list[GraphEntity]:
    """Entities with what their visible mentions say: attributes merged and the most
    specific kind, the newest winning — nothing learned in a hidden compartment."""
    ids = [row.id for row in rows]
    attributes: dict[str, dict[str, str]] = {i: {} for i in ids}
    kinds: dict[str, str] = {}
    if ids:
        statement = (
            select(_m.entity_id, _m.attributes, _m.kind)
            .where(_m.agent_id == agent_id, _m.entity_id.in_(ids), _visible(graph_mentions, view))
            .order_by(_m.learned_at, _m.id)
        )
        for entity_id, values, kind in connection.execute(statement).all():
            attributes[entity_id].update({str(k): str(v) for k, v in dict(values or {}).items()})
            if kind != "thing" or entity_id not in kinds:
                kinds[entity_id] = kind
    return [
        GraphEntity(id=row.id, name=row.name, kind=kinds.get(row.id, "thing"), attributes=attributes[row.id])
        for row in rows
    ]
