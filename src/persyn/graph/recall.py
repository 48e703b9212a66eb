"""Graph context for a turn (SPEC §4.3): the entities the input mentions, their n-hop
neighbourhood and the shortest paths between them, rendered as lines under a token budget.

Mentions are found by looking up every 1-4 word span of the input as a normalised entity
name (`entity_key`): an index lookup, no model call. Everything is read through a
`GraphView`, so only facts visible in the current compartment are ever rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import combinations

from persyn.core.errors import InputError
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphEntity, GraphRelation, GraphView, entity_key

__all__ = ["GraphContext", "candidate_keys", "neighbours", "recall"]

_TOKEN = re.compile(r"[\w][\w'&.-]*", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)
_MAX_SPAN = 4
_MAX_WORDS = 120  # 1..4-word spans of 120 words: 474 keys, under the store's bound of 500
_MAX_STARTS = 8
_MAX_PATH_ENDS = 3


def candidate_keys(text: str) -> list[str]:
    """Every 1..4-word span of `text` (its last 120 words) as an entity key, in the order
    the spans start (the longest first at each word), so what was named first comes first."""
    words = [_POSSESSIVE.sub("", w) for w in _TOKEN.findall(text)[-_MAX_WORDS:]]
    keys: dict[str, None] = {}
    for start in range(len(words)):
        for size in range(min(_MAX_SPAN, len(words) - start), 0, -1):
            span = " ".join(words[start : start + size])
            try:
                key = entity_key(span)
            except InputError:
                continue
            if size > 1 or len(key) > 1:
                keys.setdefault(key, None)
    return list(keys)


def _key_of(name: str) -> str:
    try:
        return entity_key(name)
    except InputError:
        return name


@dataclass(frozen=True)
class GraphContext:
    mentioned: tuple[GraphEntity, ...]
    entities: tuple[GraphEntity, ...]
    relations: tuple[GraphRelation, ...]
    paths: tuple[tuple[GraphRelation, ...], ...]

    def lines(self, budget_tokens: int) -> list[str]:
        """Paths first (they answer "how are these connected"), then the neighbourhood
        nearest first, then what is known about the entities; cut at the budget
        (4 characters a token)."""
        candidates: list[str] = []
        for path in self.paths:
            candidates.append("; ".join(r.line() for r in path))
        seen_lines = set(candidates)
        for relation in self.relations:
            line = relation.line()
            if line not in seen_lines:
                seen_lines.add(line)
                candidates.append(line)
        for entity in self.entities:
            if entity.attributes:
                facts = ", ".join(f"{k}: {v}" for k, v in sorted(entity.attributes.items()))
                candidates.append(f"{entity.name} ({entity.kind}) — {facts}")
        budget = max(0, budget_tokens) * 4
        out: list[str] = []
        for line in candidates:
            cost = len(line) + 3
            if cost > budget:
                break
            budget -= cost
            out.append(line)
        return out


async def recall(
    store: GraphPort, agent_id: str, text: str, view: GraphView, *, hops: int, limit: int, max_path_hops: int
) -> GraphContext | None:
    """What the graph knows around the entities `text` mentions, or None if it names none."""
    keys = candidate_keys(text)
    found = await store.graph_entities(agent_id, keys, view)
    if not found:
        return None
    order = {key: n for n, key in enumerate(keys)}
    # In the order the input names them (the store answers in key order).
    mentioned = sorted(found, key=lambda e: order.get(_key_of(e.name), len(order)))[:_MAX_STARTS]
    around = await store.graph_neighbourhood(agent_id, [e.id for e in mentioned], hops, view, limit)
    paths: list[tuple[GraphRelation, ...]] = []
    for a, b in combinations(mentioned[:_MAX_PATH_ENDS], 2):
        path = await store.graph_path(agent_id, a.id, b.id, view, max_path_hops)
        if path:
            paths.append(tuple(path))
    return GraphContext(
        mentioned=tuple(mentioned), entities=around.entities, relations=around.relations, paths=tuple(paths)
    )


async def neighbours(
    store: GraphPort,
    agent_id: str,
    text: str,
    conversation_id: str | None,
    view: GraphView,
    *,
    limit: int = 30,
) -> GraphContext:
    """What the graph links a memory to: the entities its conversation taught and those its
    text names (`mentioned`), and the visible relations one hop around them — read in `view`,
    the memory's own situation, so nothing shows beside it that could not surface with it."""
    taught = await store.conversation_entities(agent_id, [conversation_id], view) if conversation_id else []
    named = await store.graph_entities(agent_id, candidate_keys(text), view)
    mentioned = list({e.id: e for e in [*taught, *named]}.values())[: _MAX_STARTS * 2]
    if not mentioned:
        return GraphContext(mentioned=(), entities=(), relations=(), paths=())
    around = await store.graph_neighbourhood(agent_id, [e.id for e in mentioned], 1, view, limit)
    return GraphContext(
        mentioned=tuple(mentioned), entities=around.entities, relations=around.relations, paths=()
    )
