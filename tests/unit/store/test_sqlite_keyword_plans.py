"""Keyword search on SQLite answers from the index's best-ranked matches when they prove the
answer, else by filtering on the compartment's rowids: both plans give the same top k in the
same tie order, whatever share of the agent's records the compartment holds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store._sqlite_memory import (  # pyright: ignore[reportPrivateUsage]
    _keyword_by_filter,  # pyright: ignore[reportPrivateUsage]
    _keyword_by_top,  # pyright: ignore[reportPrivateUsage]
    fts_any_query,
)
from persyn.store.sqlite import SQLiteStore

START = datetime(2025, 3, 1, tzinfo=UTC)
# A small vocabulary and short summaries: many records score exactly alike.
WORDS = ["lake", "river", "boat", "fish", "rain", "snow", "bread", "garden", "violin", "comet"]
Found = list[tuple[str, float]]


class _Plans(SQLiteStore):
    """The real store, with each plan runnable on its own."""

    async def by_filter(self, agent_id: str, query: str, k: int, channels: list[str] | None) -> Found:
        match = fts_any_query(query)
        assert match is not None
        return await self._read("filter plan", lambda c: _keyword_by_filter(c, agent_id, match, k, channels))

    async def by_top(self, agent_id: str, query: str, k: int, channels: list[str] | None) -> Found | None:
        match = fts_any_query(query)
        assert match is not None
        return await self._read("top plan", lambda c: _keyword_by_top(c, agent_id, match, k, channels))


def _records(
    agent_id: str, count: int, channels: list[tuple[str, float]], rng: random.Random
) -> list[MemoryRecord]:
    names = [name for name, _ in channels]
    shares = [share for _, share in channels]
    records: list[MemoryRecord] = []
    for index in range(count):
        # Every third record shares its timestamp with the one before: the id breaks the tie.
        at = START + timedelta(minutes=index - index % 3)
        body = " ".join(rng.choices(WORDS[: rng.choice((3, 10))], k=rng.randint(1, 4)))
        records.append(
            MemoryRecord(
                id=derived_id(at, agent_id, str(index)),
                agent_id=agent_id,
                created_at=at,
                channel=rng.choices(names, weights=shares)[0],
                summary=body,
                tags=("comet",) if index % 17 == 0 else (),
                sensitivity=Sensitivity.PUBLIC,
            )
        )
    return records


async def test_both_plans_agree_on_top_k_and_tie_order(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = _Plans(tmp_path / "persyn.db")
    await store.setup()
    try:
        agent, other = derived_id(START, "agent"), derived_id(START, "other")
        for agent_id in (agent, other):
            await store.ensure_agent(agent_id, agent_id, START)
        mine = _records(agent, 3000, [("big", 0.9), ("small", 0.02), ("mid", 0.08)], rng)
        theirs = _records(other, 1500, [("big", 0.5), ("elsewhere", 0.5)], rng)
        await store.add_records(mine, None, None)
        await store.add_records(theirs, None, None)

        queries = [
            "lake",
            "comet",
            "violin garden",
            "rain snow bread",
            "boat fish river lake",
            "garden comet",
        ]
        compartments: list[list[str] | None] = [
            ["big"],
            ["small"],
            ["mid"],
            ["big", "small"],
            None,
            ["nowhere"],
        ]
        proven = {"large": 0, "small": 0}
        for query in queries:
            for channels in compartments:
                for k in (1, 7, 50, 200):
                    expected = await store.by_filter(agent, query, k, channels)
                    found = await store.keyword_candidates(agent, query, k, channels)
                    assert found == expected, (query, channels, k)
                    top = await store.by_top(agent, query, k, channels)
                    if top is not None:
                        assert top == expected, (query, channels, k)
                        proven["small" if channels in (["small"], ["nowhere"]) else "large"] += 1
        # Both plans were exercised: the top plan proves most answers in a large compartment,
        # and a compartment holding 2% of the records needs the filter plan at least sometimes.
        assert proven["large"] > 40
        assert proven["small"] < 2 * len(queries) * 4
        # Ties are real in this data: equal scores among the answers, in (newer, larger id) order.
        hits = await store.keyword_candidates(agent, "lake", 200, ["big"])
        scores = [score for _, score in hits]
        assert len(set(scores)) < len(scores)
    finally:
        await store.close()


async def test_exactly_tied_matches_straddling_the_cut_keep_the_filter_plans_order(tmp_path: Path) -> None:
    store = _Plans(tmp_path / "persyn.db")
    await store.setup()
    try:
        agent = derived_id(START, "agent")
        await store.ensure_agent(agent, "agent", START)
        # 500 identical summaries, so all score alike; the compartment holds every 5th.
        records = [
            MemoryRecord(
                id=derived_id(START + timedelta(seconds=i // 2), agent, str(i)),
                agent_id=agent,
                created_at=START + timedelta(seconds=i // 2),
                channel="here" if i % 5 == 0 else "there",
                summary="walked by the lake",
                sensitivity=Sensitivity.PUBLIC,
            )
            for i in range(500)
        ]
        await store.add_records(records, None, None)
        for k in (1, 3, 20, 99, 100, 150):
            expected = await store.by_filter(agent, "lake", k, ["here"])
            assert len(expected) == min(k, 100)
            assert await store.keyword_candidates(agent, "lake", k, ["here"]) == expected
            assert await store.keyword_candidates(agent, "lake", k, None) == await store.by_filter(
                agent, "lake", k, None
            )
    finally:
        await store.close()
