"""Writing the knowledge graph (SPEC §4.3): an upsert of what one conversation
taught (`upsert_graph_rows`: planned and validated before anything is written, then one
write transaction), and a directory merge's re-attribution of facts
(`replace_graph_participant`). `graph.py` reads; this module writes, with the same
portable SQLAlchemy Core.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.store.ports.graph_rows import (
    MAX_NAME,
    EntityFact,
    FactSource,
    GraphWrite,
    RelationFact,
    entity_key,
    relation_label,
)
from persyn.store.schema.graph import (
    graph_entities,
    graph_fact_participants,
    graph_links,
    graph_mentions,
    graph_relations,
)

__all__ = ["GraphPlan", "plan_graph_write", "replace_graph_participant", "upsert_graph_rows"]

_e = graph_entities.c
_m = graph_mentions.c
_r = graph_relations.c
_p = graph_fact_participants.c
_l = graph_links.c


def replace_graph_participant(connection: Connection, agent_id: str, old: str, new: str) -> int:
    """Directory merge: facts learned in `old`'s presence were learned in `new`'s. A fact
    that had both keeps one row; provenance keys are rebuilt so a later upsert still finds it."""
    facts = list(
        connection.execute(select(_p.fact_id).where(_p.agent_id == agent_id, _p.person_id == old)).scalars()
    )
    if not facts:
        return 0
    has_new = set(
        connection.execute(
            select(_p.fact_id).where(_p.agent_id == agent_id, _p.person_id == new, _p.fact_id.in_(facts))
        ).scalars()
    )
    for fact_id in facts:
        if fact_id in has_new:
            connection.execute(
                graph_fact_participants.delete().where(
                    _p.agent_id == agent_id, _p.fact_id == fact_id, _p.person_id == old
                )
            )
        else:
            connection.execute(
                update(graph_fact_participants)
                .where(_p.agent_id == agent_id, _p.fact_id == fact_id, _p.person_id == old)
                .values(person_id=new)
            )
        people = sorted(
            connection.execute(
                select(_p.person_id).where(_p.agent_id == agent_id, _p.fact_id == fact_id)
            ).scalars()
        )
        for table in (graph_mentions, graph_relations):
            connection.execute(
                update(table)
                .where(table.c.agent_id == agent_id, table.c.id == fact_id)
                .values(participants_key=",".join(people))
            )
        _fold_duplicate(connection, agent_id, fact_id)
    return len(facts)


def _fold_duplicate(connection: Connection, agent_id: str, fact_id: str) -> None:
    """After a merge a fact may now have the same provenance as another copy of itself
    (learned once with each of the two records): keep the older row, fold the other in."""
    for table, same in (
        (graph_mentions, (_m.entity_id,)),
        (graph_relations, (_r.source_id, _r.relation, _r.target_id)),
    ):
        row = connection.execute(
            select(table).where(table.c.agent_id == agent_id, table.c.id == fact_id)
        ).first()
        if row is None:
            continue
        twin_of = [column == getattr(row, column.name) for column in same]
        twin = connection.execute(
            select(table)
            .where(
                table.c.agent_id == agent_id,
                table.c.id != fact_id,
                table.c.channel == row.channel,
                table.c.sensitivity == row.sensitivity,
                table.c.participants_key == row.participants_key,
                *twin_of,
            )
            .order_by(table.c.id)
        ).first()
        if twin is None:
            continue
        keep, drop = (twin, row) if twin.id < row.id else (row, twin)
        newest = max(keep, drop, key=lambda r: r.learned_at)
        changes: dict[str, Any] = {"learned_at": newest.learned_at, "conversation_id": newest.conversation_id}
        if table is graph_mentions:
            older = min(keep, drop, key=lambda r: r.learned_at)
            changes["attributes"] = {**dict(older.attributes or {}), **dict(newest.attributes or {})}
            changes["kind"] = newest.kind if newest.kind != "thing" else older.kind
        connection.execute(
            update(table).where(table.c.agent_id == agent_id, table.c.id == keep.id).values(**changes)
        )
        connection.execute(
            graph_fact_participants.delete().where(_p.agent_id == agent_id, _p.fact_id == drop.id)
        )
        if table is graph_relations:
            connection.execute(graph_links.delete().where(_l.agent_id == agent_id, _l.relation_id == drop.id))
        connection.execute(table.delete().where(table.c.agent_id == agent_id, table.c.id == drop.id))


class GraphPlan:
    """A validated, normalised upsert: entities by key, relations as key triples."""

    def __init__(self) -> None:
        self.entities: dict[str, tuple[str, str, dict[str, str]]] = {}  # key -> name, kind, attributes
        self.relations: list[tuple[str, str, str]] = []


def plan_graph_write(
    source: FactSource, entities: Sequence[EntityFact], relations: Sequence[RelationFact]
) -> GraphPlan:
    if not source.channel:
        raise InputError("a graph fact needs the channel it was learned on")
    plan = GraphPlan()

    def add(name: str, kind: str | None, attributes: dict[str, str]) -> str:
        key = entity_key(name)
        known = plan.entities.get(key)
        clean_kind = (kind or "").strip()[:100]
        values = {k.strip()[:100]: v.strip()[:500] for k, v in attributes.items() if k.strip() and v.strip()}
        if known is None:
            plan.entities[key] = (name.strip()[:MAX_NAME], clean_kind or "thing", values)
        else:
            merged_kind = known[1] if known[1] != "thing" or not clean_kind else clean_kind
            plan.entities[key] = (known[0], merged_kind, {**known[2], **values})
        return key

    for entity in entities:
        add(entity.name, entity.kind, entity.attributes)
    seen: set[tuple[str, str, str]] = set()
    for relation in relations:
        triple = (
            add(relation.source, None, {}),
            relation_label(relation.relation),
            add(relation.target, None, {}),
        )
        if triple[0] == triple[2]:
            raise InputError(f"relation {relation.relation!r} links {relation.source!r} to itself")
        if triple not in seen:
            seen.add(triple)
            plan.relations.append(triple)
    return plan


def upsert_graph_rows(
    connection: Connection, agent_id: str, source: FactSource, plan: GraphPlan
) -> GraphWrite:
    people = sorted(set(source.participant_ids))
    people_key = ",".join(people)
    # Naive means UTC (as UTCDateTime stores it), so it compares with what is stored.
    at = source.learned_at if source.learned_at.tzinfo else source.learned_at.replace(tzinfo=UTC)
    counts = {"entities_added": 0, "mentions_added": 0, "relations_added": 0, "refreshed": 0}

    def participants(fact_id: str) -> None:
        if people:
            connection.execute(
                insert(graph_fact_participants),
                [
                    {"id": new_id(at), "agent_id": agent_id, "fact_id": fact_id, "person_id": p}
                    for p in people
                ],
            )

    def same_provenance(table: Table) -> ColumnElement[bool]:
        return and_(
            table.c.agent_id == agent_id,
            table.c.channel == source.channel,
            table.c.sensitivity == source.sensitivity.value,
            table.c.participants_key == people_key,
        )

    ids: dict[str, str] = {}
    for key, (name, kind, attributes) in plan.entities.items():
        row = connection.execute(select(_e.id).where(_e.agent_id == agent_id, _e.key == key)).first()
        if row is None:
            entity_id = new_id(at)
            connection.execute(
                insert(graph_entities).values(
                    id=entity_id, agent_id=agent_id, name=name, key=key, created_at=at, updated_at=at
                )
            )
            counts["entities_added"] += 1
        else:
            entity_id = row.id
        ids[key] = entity_id
        mention = connection.execute(
            select(_m.id, _m.attributes, _m.learned_at, _m.kind).where(
                same_provenance(graph_mentions), _m.entity_id == entity_id
            )
        ).first()
        if mention is None:
            mention_id = new_id(at)
            connection.execute(
                insert(graph_mentions).values(
                    id=mention_id,
                    agent_id=agent_id,
                    entity_id=entity_id,
                    kind=kind,
                    channel=source.channel,
                    sensitivity=source.sensitivity.value,
                    participants_key=people_key,
                    conversation_id=source.conversation_id,
                    attributes=attributes,
                    learned_at=at,
                )
            )
            participants(mention_id)
            counts["mentions_added"] += 1
        else:
            newer = at >= mention.learned_at
            known = dict(mention.attributes or {})
            # The newer learning wins, whichever order extraction ran in.
            merged = {**known, **attributes} if newer else {**attributes, **known}
            sharper = kind if kind != "thing" and (newer or mention.kind == "thing") else mention.kind
            changes: dict[str, Any] = {"attributes": merged, "kind": sharper}
            if newer:
                changes.update(learned_at=at, conversation_id=source.conversation_id)
            connection.execute(
                update(graph_mentions).where(_m.agent_id == agent_id, _m.id == mention.id).values(**changes)
            )
            counts["refreshed"] += 1
        connection.execute(
            update(graph_entities).where(_e.agent_id == agent_id, _e.id == entity_id).values(updated_at=at)
        )
    for source_key, label, target_key in plan.relations:
        source_id, target_id = ids[source_key], ids[target_key]
        known = connection.execute(
            select(_r.id, _r.learned_at).where(
                same_provenance(graph_relations),
                _r.source_id == source_id,
                _r.relation == label,
                _r.target_id == target_id,
            )
        ).first()
        if known is None:
            relation_id = new_id(at)
            connection.execute(
                insert(graph_relations).values(
                    id=relation_id,
                    agent_id=agent_id,
                    source_id=source_id,
                    relation=label,
                    target_id=target_id,
                    channel=source.channel,
                    sensitivity=source.sensitivity.value,
                    participants_key=people_key,
                    conversation_id=source.conversation_id,
                    learned_at=at,
                )
            )
            participants(relation_id)
            connection.execute(
                insert(graph_links),
                [
                    {
                        "id": new_id(at),
                        "agent_id": agent_id,
                        "from_id": a,
                        "to_id": b,
                        "relation_id": relation_id,
                    }
                    for a, b in ((source_id, target_id), (target_id, source_id))
                ],
            )
            counts["relations_added"] += 1
        else:
            if at >= known.learned_at:
                connection.execute(
                    update(graph_relations)
                    .where(_r.agent_id == agent_id, _r.id == known.id)
                    .values(learned_at=at, conversation_id=source.conversation_id)
                )
            counts["refreshed"] += 1
    return GraphWrite(**counts)
