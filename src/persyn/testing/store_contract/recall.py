"""What every storage backend must do to recall long-term memory (SPEC §4.1, §5): vector and
keyword candidates, filtered by agent and channel set inside the index, at scale and under
any query. Vectors are hand-made (4-d unless a test says otherwise), times come from fixed
instants.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord
from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract
from persyn.testing.store_contract.memory import (
    DISCORD,
    MAIN,
    MODEL,
    SLACK,
    T0,
    _add,
    _cosine_distance,
    _ids,
    _record,
)

HOSTILE = [
    '"',
    '""',
    "'",
    "*",
    "lake*",
    "^lake",
    "summary:lake",
    "tags:lake",
    "NEAR(lake ann, 2)",
    "lake AND",
    "OR",
    "NOT lake",
    "-lake",
    "(((",
    "lake)",
    '"lake',
    "\x00lake",
    "lake\x00\x00",
    "{summary tags}: lake",
    "lake + ann",
    "🦦 otters",
    "ß" * 500,
    " ".join(["lake"] * 5000),
    " ".join(f"word{i}" for i in range(500)),
]


# properties -----------------------------------------------------------------------------------------
VOCABULARY = ["otter", "lake", "piano", "bread", "comet", "garden"]
CHANNELS = [MAIN, SLACK, DISCORD]
_vector = st.lists(st.integers(-3, 3), min_size=4, max_size=4).map(lambda v: v if any(v) else [1, 0, 0, 0])
_record_spec = st.tuples(
    st.integers(0, 1),  # agent
    st.sampled_from(CHANNELS),
    _vector,
    st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3),
)


class RecallContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    # vector search ----------------------------------------------------------------------------------------
    async def test_vector_candidates_are_ordered_by_cosine_distance(self, store: FullStore) -> None:
        agent_id = new_id()
        same = await _add(store, _record(agent_id, "same"), [2, 0, 0, 0])  # length does not matter
        near = await _add(store, _record(agent_id, "near"), [1, 1, 0, 0])
        orthogonal = await _add(store, _record(agent_id, "orthogonal"), [0, 0, 3, 0])
        opposite = await _add(store, _record(agent_id, "opposite"), [-1, 0, 0, 0])

        hits = await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)
        assert _ids(hits) == [same.id, near.id, orthogonal.id, opposite.id]
        expected = [0.0, 1 - math.sqrt(0.5), 1.0, 2.0]
        assert [d for _, d in hits] == pytest.approx(expected, abs=1e-5)
        assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 2, None)) == [same.id, near.id]
        assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 0, None) == []
        assert await store.vector_candidates(agent_id, [0, 0, 0, 0], 5, None) == []  # no direction
        with pytest.raises(InputError):
            await store.vector_candidates(agent_id, [math.inf, 0, 0, 0], 5, None)

    async def test_vector_candidates_filter_by_agent_and_channel_set_inside_the_index(
        self, store: FullStore
    ) -> None:
        agent_id, other = new_id(), new_id()
        # The closest vectors overall belong to another agent or another channel.
        await _add(store, _record(other, "theirs", channel=MAIN), [1, 0, 0, 0])
        slack = await _add(store, _record(agent_id, "slack", channel=SLACK), [1, 0.01, 0, 0])
        main_far = await _add(store, _record(agent_id, "main", channel=MAIN), [0, 1, 0, 0])
        discord = await _add(store, _record(agent_id, "discord", channel=DISCORD), [1, 1, 0, 0])

        # k=1 within {main, discord}: the nearest in the set, not the nearest overall thinned out
        assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 1, [MAIN, DISCORD])) == [discord.id]
        both = await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, [DISCORD, MAIN, MAIN])
        assert _ids(both) == [discord.id, main_far.id]
        assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, [SLACK])) == [slack.id]
        assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, ["nowhere:at-all"]) == []
        assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, []) == []
        everything = await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)
        assert _ids(everything) == [slack.id, discord.id, main_far.id]
        assert await store.vector_candidates(new_id(), [1, 0, 0, 0], 10, None) == []

    async def test_vector_recall_answers_as_the_search_and_then_the_fetch(self, store: FullStore) -> None:
        agent_id, other = new_id(), new_id()
        await _add(store, _record(other, "theirs", channel=MAIN), [1, 0, 0, 0])
        records = [
            await _add(store, _record(agent_id, "main near", channel=MAIN, tags=["a"]), [1, 0.1, 0, 0]),
            await _add(
                store, _record(agent_id, "main far", channel=MAIN, participants=[new_id()]), [0, 1, 0, 0]
            ),
            await _add(store, _record(agent_id, "discord", channel=DISCORD, importance=9), [1, 1, 0, 0]),
            await _add(store, _record(agent_id, "slack", channel=SLACK), [1, 0, 0.2, 0]),
        ]
        await _add(store, _record(agent_id, "no vector", channel=MAIN))
        query = [1, 0, 0, 0]

        for k, channels in (
            (10, None),
            (2, None),
            (10, [MAIN, DISCORD]),
            (1, [MAIN, DISCORD]),
            (10, [SLACK]),
        ):
            found = await store.vector_recall(agent_id, query, k, channels)
            hits = await store.vector_candidates(agent_id, query, k, channels)
            assert found.hits == hits
            expected = await store.recall_candidates(agent_id, _ids(hits))
            assert sorted(found.candidates, key=lambda c: c.id) == sorted(expected, key=lambda c: c.id)
            by_id = {r.id: r for r in records}
            built = sorted((c.record() for c in found.candidates), key=lambda r: r.id)
            assert built == sorted((by_id[i] for i in _ids(hits)), key=lambda r: r.id)
        in_two = await store.vector_recall(agent_id, query, 10, [DISCORD, MAIN, MAIN])
        assert {c.channel for c in in_two.candidates} == {MAIN, DISCORD}
        assert _ids(in_two.hits) == [records[0].id, records[2].id, records[1].id]

        empty = [
            await store.vector_recall(agent_id, query, 0, None),
            await store.vector_recall(agent_id, query, 10, []),
            await store.vector_recall(agent_id, query, 10, ["nowhere:at-all"]),
            await store.vector_recall(agent_id, [0, 0, 0, 0], 10, None),  # no direction
            await store.vector_recall(agent_id, [1, 0, 0], 10, None),  # no vectors of this size
            await store.vector_recall(new_id(), query, 10, None),
        ]
        assert all(e.hits == [] and e.candidates == [] for e in empty)
        with pytest.raises(InputError):
            await store.vector_recall(agent_id, [math.nan, 0, 0, 0], 5, None)

        # A record deleted (after a search found it) is no longer found, with or without its row.
        assert await store.delete_records(agent_id, [records[0].id]) == 1
        after = await store.vector_recall(agent_id, query, 10, None)
        assert records[0].id not in _ids(after.hits)
        assert sorted(c.id for c in after.candidates) == sorted(_ids(after.hits))
        assert _ids(after.hits) == [records[3].id, records[2].id, records[1].id]

    async def test_vector_candidates_search_only_vectors_of_the_query_size(self, store: FullStore) -> None:
        agent_id = new_id()
        assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None) == []  # no index yet
        four = await _add(store, _record(agent_id, "four"), [1, 0, 0, 0])
        three = await _add(store, _record(agent_id, "three"), [1, 0, 0])
        assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)) == [four.id]
        assert _ids(await store.vector_candidates(agent_id, [1, 0, 0], 10, None)) == [three.id]
        assert await store.vector_candidates(agent_id, [1, 0, 0, 0, 0, 0, 0], 10, None) == []

    # keyword search ----------------------------------------------------------------------------------------
    async def test_keyword_candidates_match_any_word_and_rank_by_bm25(self, store: FullStore) -> None:
        agent_id = new_id()
        both = await _add(store, _record(agent_id, "Ann and I went hiking by the lake"))
        lake = await _add(store, _record(agent_id, "The lake froze early this year", at=T0 + timedelta(1)))
        ann = await _add(store, _record(agent_id, "Ann baked sourdough bread", at=T0 + timedelta(2)))
        await _add(store, _record(agent_id, "A quiet evening reading about comets"))
        tagged = await _add(store, _record(agent_id, "We looked up at the sky", tags=["astronomy"]))

        hits = await store.keyword_candidates(agent_id, "what did Ann do at the lake?", 10, None)
        assert _ids(hits)[0] == both.id  # both words beat one
        assert set(_ids(hits)) == {both.id, lake.id, ann.id}
        scores = [score for _, score in hits]
        assert scores == sorted(scores, reverse=True) and all(score > 0 for score in scores)

        assert _ids(await store.keyword_candidates(agent_id, "hiked", 10, None)) == [both.id]  # stemming
        assert _ids(await store.keyword_candidates(agent_id, "Astronomy", 10, None)) == [tagged.id]
        assert len(await store.keyword_candidates(agent_id, "lake ann", 1, None)) == 1
        assert await store.keyword_candidates(agent_id, "lake", 0, None) == []
        assert await store.keyword_candidates(agent_id, "volcano", 10, None) == []
        assert await store.keyword_candidates(agent_id, "  ?! ", 10, None) == []

    async def test_keyword_candidates_filter_by_agent_and_channel_set(self, store: FullStore) -> None:
        agent_id, other = new_id(), new_id()
        await _add(store, _record(other, "otters in the harbour"))
        main = await _add(store, _record(agent_id, "otters on the beach", channel=MAIN))
        slack = await _add(store, _record(agent_id, "otters again", channel=SLACK))
        discord = await _add(store, _record(agent_id, "more otters", channel=DISCORD))

        assert set(_ids(await store.keyword_candidates(agent_id, "otters", 10, None))) == {
            main.id,
            slack.id,
            discord.id,
        }
        found = await store.keyword_candidates(agent_id, "otters", 10, [MAIN, DISCORD])
        assert set(_ids(found)) == {main.id, discord.id}
        assert await store.keyword_candidates(agent_id, "otters", 10, []) == []
        assert await store.keyword_candidates(new_id(), "otters", 10, None) == []

    async def test_keyword_recall_answers_as_the_search_and_then_the_fetch(self, store: FullStore) -> None:
        agent_id, other = new_id(), new_id()
        await _add(store, _record(other, "otters in the harbour"))
        records = [
            await _add(store, _record(agent_id, "otters on the beach", channel=MAIN, tags=["otters"])),
            await _add(store, _record(agent_id, "otters again", channel=SLACK, participants=[new_id()])),
            await _add(store, _record(agent_id, "more otters and seals", channel=DISCORD, importance=9)),
        ]
        # Ten records scoring alike: the cut of k falls inside the tie (the newer ones win).
        for i in range(10):
            at = T0 + timedelta(days=1, minutes=i)
            records.append(await _add(store, _record(agent_id, f"harbour seals {i}", channel=MAIN, at=at)))
        by_id = {r.id: r for r in records}

        for query, k, channels in (
            ("otters", 10, None),
            ("otters seals", 10, None),
            ("otters seals", 3, [MAIN, DISCORD]),
            ("seals", 4, [MAIN]),
            ("otters", 1, [SLACK]),
        ):
            found = await store.keyword_recall(agent_id, query, k, channels)
            hits = await store.keyword_candidates(agent_id, query, k, channels)
            assert found.hits == hits and hits
            expected = await store.recall_candidates(agent_id, _ids(hits))
            assert sorted(found.candidates, key=lambda c: c.id) == sorted(expected, key=lambda c: c.id)
            built = sorted((c.record() for c in found.candidates), key=lambda r: r.id)
            assert built == sorted((by_id[i] for i in _ids(hits)), key=lambda r: r.id)
        newest_seals = sorted(
            (r for r in records if r.summary.startswith("harbour")), key=lambda r: r.created_at
        )
        assert _ids((await store.keyword_recall(agent_id, "seals", 4, [MAIN])).hits) == [
            r.id for r in reversed(newest_seals[-4:])
        ]

        empty = [
            await store.keyword_recall(agent_id, "otters", 0, None),
            await store.keyword_recall(agent_id, "otters", 10, []),
            await store.keyword_recall(agent_id, "otters", 10, ["nowhere:at-all"]),
            await store.keyword_recall(agent_id, "volcano", 10, None),
            await store.keyword_recall(agent_id, "  ?! ", 10, None),
            await store.keyword_recall(new_id(), "otters", 10, None),
        ]
        assert all(e.hits == [] and e.candidates == [] for e in empty)

        assert await store.delete_records(agent_id, [records[0].id]) == 1
        after = await store.keyword_recall(agent_id, "otters", 10, None)
        assert sorted(_ids(after.hits)) == sorted([records[1].id, records[2].id])
        assert sorted(c.id for c in after.candidates) == sorted(_ids(after.hits))

    @pytest.mark.parametrize("query", HOSTILE)
    async def test_hostile_keyword_queries_are_plain_words(self, store: FullStore, query: str) -> None:
        agent_id = new_id()
        lake = await _add(store, _record(agent_id, "the lake at dawn"))
        hits = await store.keyword_candidates(agent_id, query, 5, None)
        assert set(_ids(hits)) <= {lake.id}

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.text(max_size=60))
    async def test_keyword_candidates_never_raise_on_any_text(self, store: FullStore, query: str) -> None:
        await store.keyword_candidates(new_id(), query, 5, [MAIN])

    @settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        specs=st.lists(_record_spec, max_size=25),
        agent=st.integers(0, 1),
        channels=st.none() | st.lists(st.sampled_from(CHANNELS), unique=True, max_size=3),
        query_vector=_vector,
        query_words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3),
        k=st.integers(1, 8),
    )
    async def test_candidates_never_leave_the_requested_agent_and_channels(
        self,
        store: FullStore,
        specs: list[tuple[int, str, list[int], list[str]]],
        agent: int,
        channels: list[str] | None,
        query_vector: list[int],
        query_words: list[str],
        k: int,
    ) -> None:
        agents = [new_id(), new_id()]  # fresh per example: the store outlives examples
        records: dict[str, tuple[MemoryRecord, list[int]]] = {}
        for i, (owner, channel, vector, words) in enumerate(specs):
            record = _record(agents[owner], " ".join(words), channel=channel, at=T0 + timedelta(seconds=i))
            records[record.id] = (await _add(store, record, vector), vector)
        allowed = {
            record_id
            for record_id, (record, _) in records.items()
            if record.agent_id == agents[agent] and (channels is None or record.channel in channels)
        }

        by_vector = await store.vector_candidates(agents[agent], query_vector, k, channels)
        assert set(_ids(by_vector)) <= allowed
        # and they are the k nearest of the allowed ones (compared by distance: ties may swap ids)
        brute = sorted(_cosine_distance(query_vector, records[i][1]) for i in allowed)[:k]
        assert [d for _, d in by_vector] == pytest.approx(brute, abs=1e-5)

        by_keyword = await store.keyword_candidates(agents[agent], " ".join(query_words), k, channels)
        assert set(_ids(by_keyword)) <= allowed
        matching = {i for i in allowed if set(records[i][0].summary.split()) & set(query_words)}
        assert set(_ids(by_keyword)) <= matching
        assert len(by_keyword) == min(k, len(matching))

    # scale -------------------------------------------------------------------------------------------------
    async def test_five_thousand_records_with_256_dimensional_vectors(self, store: FullStore) -> None:
        """A smoke test at a realistic size: no timing assertions, only that it works."""
        agent_id = new_id()
        rng = random.Random(7)
        words = ["lake", "river", "music", "bread", "garden", "comet", "otter", "piano", "rain", "snow"]
        first: tuple[MemoryRecord, list[float]] | None = None
        for i in range(5000):
            vector = [rng.gauss(0, 1) for _ in range(256)]
            summary = " ".join(rng.sample(words, 3)) + f" note {i}"
            record = _record(agent_id, summary, at=T0 + timedelta(seconds=i), channel=CHANNELS[i % 3])
            await _add(store, record, vector)
            first = first or (record, vector)
        assert first is not None
        assert await store.count_records(agent_id) == 5000

        hits = await store.vector_candidates(agent_id, first[1], 20, None)
        assert len(hits) == 20 and hits[0] == (first[0].id, pytest.approx(0.0, abs=1e-5))
        in_two = await store.vector_candidates(agent_id, first[1], 20, [MAIN, DISCORD])
        assert len(in_two) == 20
        assert {r.channel for r in await store.records_by_ids(agent_id, _ids(in_two))} <= {MAIN, DISCORD}
        assert len(await store.keyword_candidates(agent_id, "otter piano", 50, None)) == 50
        assert len(await store.list_records(agent_id, limit=100)) == 100

    async def test_one_large_compartment_is_searched_well_and_never_leaks(self, store: FullStore) -> None:
        """4,000 clustered 32-d vectors in ONE channel (large enough for a backend's approximate
        index), beside the same agent's other channel and another agent's same channel, which
        hold exact copies of every query. Recall@10 against brute force stays high, the
        distances are exact, and nothing outside the compartment asked for comes back."""
        agent_id, stranger = new_id(), new_id()
        rng = random.Random(20)
        common = [rng.gauss(0, 1.5) for _ in range(32)]
        centres = [[rng.gauss(0, 1) for _ in range(32)] for _ in range(30)]

        def draw() -> list[float]:
            centre = rng.choice(centres)
            return [c + m + rng.gauss(0, 0.8) for c, m in zip(common, centre, strict=True)]

        mine = [
            (_record(agent_id, f"memory {i}", at=T0 + timedelta(milliseconds=i)), draw()) for i in range(4000)
        ]
        assert all(await store.add_records([r for r, _ in mine], [v for _, v in mine], MODEL))
        queries = [draw() for _ in range(15)]
        for owner, channel in ((agent_id, DISCORD), (stranger, MAIN)):
            copies = [
                (_record(owner, "a copy", at=T0 + timedelta(seconds=i), channel=channel), queries[i % 15])
                for i in range(300)
            ]
            assert all(await store.add_records([r for r, _ in copies], [v for _, v in copies], MODEL))
        allowed = {r.id for r, _ in mine}
        found = 0
        for query in queries:
            hits = await store.vector_candidates(agent_id, query, 10, [MAIN])
            assert len(hits) == 10 and set(_ids(hits)) <= allowed
            exact = sorted((_cosine_distance(query, v), r.id) for r, v in mine)[:10]
            found += len(set(_ids(hits)) & {i for _, i in exact})
            by_id = dict((r.id, v) for r, v in mine)
            assert [d for _, d in hits] == pytest.approx(
                [_cosine_distance(query, by_id[i]) for i, _ in hits], abs=1e-5
            )
        assert found / (10 * len(queries)) >= 0.9
