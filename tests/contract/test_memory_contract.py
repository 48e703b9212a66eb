"""What every storage backend that offers autobiographical memory must do (SPEC §4.1, §5; the
`MemoryPort` methods). Runs once per backend through the `store` fixture. Vectors are
hand-made (4-d unless a test says otherwise), times come from fixed instants.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persyn.core.errors import InputError, StoreError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity, channel_key
from persyn.store.base import RecallCandidate
from persyn.store.capabilities import FullStore
from persyn.store.ports.jobs import ConsolidationStatus

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MAIN = channel_key("terminal", "main")
DISCORD = channel_key("discord", "a-rather-long-guild-and-channel-name")
SLACK = channel_key("slack", "general")
MODEL = "test-embedder"


def _record(
    agent_id: str,
    summary: str,
    *,
    at: datetime = T0,
    channel: str = MAIN,
    importance: int = 5,
    tags: Sequence[str] = (),
    participants: Sequence[str] = (),
    ref: str | None = None,
) -> MemoryRecord:
    return MemoryRecord(
        id=new_id(at),
        agent_id=agent_id,
        created_at=at,
        channel=channel,
        participant_ids=tuple(participants),
        summary=summary,
        importance=importance,
        tags=tuple(tags),
        ref=ref,
    )


async def _add(
    store: FullStore, record: MemoryRecord, vector: Sequence[float] | None = None, model: str = MODEL
) -> MemoryRecord:
    assert await store.add_record(record, vector, model if vector is not None else None)
    return record


def _ids(hits: Sequence[tuple[str, float]]) -> list[str]:
    return [record_id for record_id, _ in hits]


def _cosine_distance(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1.0 - dot / (math.hypot(*a) * math.hypot(*b))


# records ------------------------------------------------------------------------------------------
async def test_a_record_round_trips_every_field(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    record = MemoryRecord(
        id=new_id(T0),
        agent_id=agent_id,
        created_at=T0,
        channel=DISCORD,
        participant_ids=(new_id(), new_id()),
        summary="I helped Zoë fix her bicycle; she said « merci ».",
        importance=8,
        tags=("bicycles", "café", "help"),
        emotion="content",
        sensitivity=Sensitivity.CONFIDENTIAL,
        conversation_id=new_id(T0),
        message_ids=(new_id(T0), new_id(T0)),
        ref="import:discord:123",
        kind="imported",
    )
    assert await store.add_record(record, [0.1, 0.2, 0.3, 0.4], MODEL)

    assert await store.get_record(agent_id, record.id) == record
    assert await store.get_record_by_ref(agent_id, "import:discord:123") == record
    assert await store.records_by_ids(agent_id, [record.id]) == [record]
    precise = await _add(
        store, _record(agent_id, "a précise instant", at=T0 + timedelta(microseconds=123456))
    )
    assert await store.records_by_ids(agent_id, [precise.id, record.id]) == [precise, record]
    # Recall's candidates carry what it scores by, and build the very same record.
    [candidate] = await store.recall_candidates(agent_id, [record.id])
    assert candidate == RecallCandidate.of(record)
    assert candidate.record() == record
    assert await store.get_record(other, record.id) is None
    assert await store.get_record_by_ref(other, "import:discord:123") is None
    assert await store.get_record(agent_id, new_id()) is None
    fetched = await store.get_record(agent_id, record.id)
    assert fetched is not None and fetched.created_at.tzinfo is not None
    assert fetched.created_at.utcoffset() == timedelta(0)


async def test_add_record_deduplicates_on_id_and_on_ref_per_agent(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    first = await _add(store, _record(agent_id, "the original", ref="history:1"), [1, 0, 0, 0])

    again = first.model_copy(update={"summary": "a replay with other words"})
    assert not await store.add_record(again, [0, 1, 0, 0], MODEL)
    same_ref = _record(agent_id, "a re-import", at=T0 + timedelta(hours=1), ref="history:1")
    assert not await store.add_record(same_ref, None, None)
    assert await store.count_records(agent_id) == 1
    assert await store.get_record(agent_id, first.id) == first
    assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 5, None)) == [first.id]

    # refs are unique per agent; records without a ref never collide
    assert await store.add_record(_record(other, "theirs", ref="history:1"), None, None)
    await _add(store, _record(agent_id, "no ref one", at=T0 + timedelta(seconds=1)))
    await _add(store, _record(agent_id, "no ref two", at=T0 + timedelta(seconds=2)))
    assert await store.count_records(agent_id) == 3
    assert await store.count_records(other) == 1


async def test_add_record_rejects_bad_input_and_stores_nothing(store: FullStore) -> None:
    agent_id = new_id()
    with pytest.raises(InputError, match="participant id"):
        await store.add_record(_record(agent_id, "x", participants=["not-a-ulid"]), None, None)
    with pytest.raises(InputError, match="agent id"):
        await store.add_record(_record(new_id().lower(), "x"), None, None)
    with pytest.raises(InputError, match="embedding model"):
        await store.add_record(_record(agent_id, "x"), [1, 0, 0, 0], None)
    with pytest.raises(InputError, match="non-finite"):
        await store.add_record(_record(agent_id, "x"), [1, math.nan, 0, 0], MODEL)
    assert await store.count_records(agent_id) == 0


async def test_add_records_stores_a_batch_as_add_record_would_one_by_one(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    known = await _add(store, _record(agent_id, "already known", ref="history:1"), [1, 0, 0, 0])
    theirs = await _add(store, _record(other, "theirs"))
    plain = _record(agent_id, "the lake at dawn", at=T0 + timedelta(1), tags=["lake"])
    no_vector = _record(agent_id, "a lake without a vector", at=T0 + timedelta(2))
    blank = _record(agent_id, "a blank lake", at=T0 + timedelta(3))
    wide = _record(agent_id, "a wider lake", at=T0 + timedelta(4), channel=SLACK)
    same_ref = _record(agent_id, "re-import of history:1", at=T0 + timedelta(5), ref="history:1")
    first_ref = _record(agent_id, "new ref", at=T0 + timedelta(6), ref="history:2")
    again_ref = _record(agent_id, "new ref, twice", at=T0 + timedelta(7), ref="history:2")
    other_ref = _record(other, "their history:2", at=T0 + timedelta(8), ref="history:2")
    batch = [
        plain,
        known.model_copy(update={"summary": "a replay"}),  # id exists
        no_vector,
        blank,
        wide,
        plain.model_copy(update={"summary": "the same id again"}),  # earlier in the batch
        same_ref,  # ref exists
        first_ref,
        again_ref,  # ref earlier in the batch
        other_ref,  # the same ref for another agent is another record
        theirs.model_copy(update={"agent_id": agent_id}),  # id taken by another agent's record
    ]
    vectors: list[list[float] | None] = [
        [0, 1, 0, 0], [0, 1, 0, 0], None, [0, 0, 0, 0], [0, 1, 0, 0, 0, 0],
        [1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 1, 0], [0, 1, 0, 0],
    ]  # fmt: skip

    added = await store.add_records(batch, vectors, MODEL)
    assert added == [True, False, True, True, True, False, False, True, False, True, False]
    assert await store.count_records(agent_id) == 6 and await store.count_records(other) == 2
    for record in (plain, no_vector, blank, wide, first_ref):
        assert await store.get_record(agent_id, record.id) == record
    assert await store.get_record(agent_id, known.id) == known
    assert await store.get_record_by_ref(agent_id, "history:2") == first_ref
    assert await store.get_record_by_ref(other, "history:2") == other_ref

    hits = await store.vector_candidates(agent_id, [0, 1, 0, 0], 10, None)
    assert _ids(hits) == [plain.id, known.id, first_ref.id]  # ties in id order; no vector: not found
    assert _ids(await store.vector_candidates(agent_id, [0, 1, 0, 0, 0, 0], 10, None)) == [wide.id]
    assert _ids(await store.vector_candidates(agent_id, [0, 0, 1, 0], 10, [MAIN])) == [
        first_ref.id,
        known.id,
        plain.id,
    ]
    found = await store.keyword_candidates(agent_id, "lake", 10, None)
    assert set(_ids(found)) == {plain.id, no_vector.id, blank.id, wide.id}
    assert [r.id for r in await store.records_needing_vectors(agent_id, MODEL, 10)] == [no_vector.id]
    stats = await store.record_stats(agent_id)
    assert stats["vectors_by_dims"] == {4: 3, 6: 1} and stats["without_vector"] == 2

    assert await store.add_records([], None, None) == []
    again = await store.add_records([plain, no_vector], None, None)
    assert again == [False, False]
    unvectored = _record(agent_id, "no vectors at all", at=T0 + timedelta(9))
    assert await store.add_records([unvectored], None, None) == [True]
    needing = await store.records_needing_vectors(agent_id, MODEL, 10)
    assert [r.id for r in needing] == [unvectored.id, no_vector.id]


@pytest.mark.parametrize(
    "problem", ["participant id", "non-finite", "embedding model", "vectors", "agent id"]
)
async def test_add_records_rejects_bad_input_anywhere_and_stores_nothing(
    store: FullStore, problem: str
) -> None:
    agent_id = new_id()
    batch = [_record(agent_id, f"record {i}", at=T0 + timedelta(minutes=i)) for i in range(5)]
    vectors: list[list[float] | None] = [[1, 0, 0, i] for i in range(5)]
    model: str | None = MODEL
    if problem == "participant id":
        batch[3] = _record(agent_id, "x", participants=["not-a-ulid"])
    elif problem == "agent id":
        batch[3] = _record(agent_id.lower(), "x")
    elif problem == "non-finite":
        vectors[3] = [1, math.inf, 0, 0]
    elif problem == "embedding model":
        model = None
    else:
        vectors = vectors[:4]
    with pytest.raises(InputError, match=problem):
        await store.add_records(batch, vectors, model)
    assert await store.count_records(agent_id) == 0
    assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None) == []


async def test_records_by_ids_returns_those_that_exist_for_the_agent(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    mine = [await _add(store, _record(agent_id, f"r{i}", at=T0 + timedelta(minutes=i))) for i in range(3)]
    theirs = await _add(store, _record(other, "theirs"))

    wanted = [mine[0].id, mine[2].id, mine[2].id, new_id(), theirs.id, "garbage"]
    found = await store.records_by_ids(agent_id, wanted)
    assert sorted(r.id for r in found) == sorted([mine[0].id, mine[2].id])
    assert await store.records_by_ids(agent_id, []) == []
    many = [new_id() for _ in range(1200)] + [mine[1].id]  # more ids than one statement binds
    assert [r.id for r in await store.records_by_ids(agent_id, many)] == [mine[1].id]
    candidates = await store.recall_candidates(agent_id, wanted)
    assert sorted((c.record() for c in candidates), key=lambda r: r.id) == sorted(found, key=lambda r: r.id)
    assert await store.recall_candidates(agent_id, []) == []
    assert [c.id for c in await store.recall_candidates(agent_id, many)] == [mine[1].id]


async def test_list_records_pages_newest_first(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    records = [
        await _add(store, _record(agent_id, f"r{i}", at=T0 + timedelta(minutes=i % 4))) for i in range(9)
    ]  # several records share an instant: (created_at, id) decides
    await _add(store, _record(other, "theirs", at=T0 + timedelta(days=1)))
    expected = sorted(records, key=lambda r: (r.created_at, r.id), reverse=True)

    pages: list[list[MemoryRecord]] = []
    before: str | None = None
    while page := await store.list_records(agent_id, limit=4, before_id=before):
        pages.append(page)
        before = page[-1].id
    assert [len(p) for p in pages] == [4, 4, 1]
    assert [r for page in pages for r in page] == expected
    assert await store.list_records(agent_id, limit=0) == []
    assert await store.list_records(agent_id) == expected

    # a cursor that has been deleted meanwhile still continues from its time
    cursor = expected[3]
    assert await store.delete_records(agent_id, [cursor.id]) == 1
    rest = await store.list_records(agent_id, limit=50, before_id=cursor.id)
    assert rest == expected[4:]


async def test_delete_records_removes_them_from_vector_and_keyword_search(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    gone = await _add(store, _record(agent_id, "a walk along the river", tags=["river"]), [1, 0, 0, 0])
    kept = await _add(store, _record(agent_id, "the river was cold", at=T0 + timedelta(1)), [1, 1, 0, 0])
    theirs = await _add(store, _record(other, "their river"), [1, 0, 0, 0])

    assert await store.delete_records(agent_id, [gone.id, gone.id, new_id(), theirs.id]) == 1
    assert await store.delete_records(agent_id, []) == 0
    assert await store.get_record(agent_id, gone.id) is None
    assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)) == [kept.id]
    assert _ids(await store.keyword_candidates(agent_id, "river walk", 10, None)) == [kept.id]
    assert await store.get_record(other, theirs.id) == theirs
    assert _ids(await store.vector_candidates(other, [1, 0, 0, 0], 10, None)) == [theirs.id]
    assert await store.count_records(agent_id) == 1


# vector search ----------------------------------------------------------------------------------------
async def test_vector_candidates_are_ordered_by_cosine_distance(store: FullStore) -> None:
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


async def test_vector_candidates_filter_by_agent_and_channel_set_inside_the_index(store: FullStore) -> None:
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


async def test_vector_recall_answers_as_the_search_and_then_the_fetch(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    await _add(store, _record(other, "theirs", channel=MAIN), [1, 0, 0, 0])
    records = [
        await _add(store, _record(agent_id, "main near", channel=MAIN, tags=["a"]), [1, 0.1, 0, 0]),
        await _add(store, _record(agent_id, "main far", channel=MAIN, participants=[new_id()]), [0, 1, 0, 0]),
        await _add(store, _record(agent_id, "discord", channel=DISCORD, importance=9), [1, 1, 0, 0]),
        await _add(store, _record(agent_id, "slack", channel=SLACK), [1, 0, 0.2, 0]),
    ]
    await _add(store, _record(agent_id, "no vector", channel=MAIN))
    query = [1, 0, 0, 0]

    for k, channels in ((10, None), (2, None), (10, [MAIN, DISCORD]), (1, [MAIN, DISCORD]), (10, [SLACK])):
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


async def test_vector_candidates_search_only_vectors_of_the_query_size(store: FullStore) -> None:
    agent_id = new_id()
    assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None) == []  # no index yet
    four = await _add(store, _record(agent_id, "four"), [1, 0, 0, 0])
    three = await _add(store, _record(agent_id, "three"), [1, 0, 0])
    assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)) == [four.id]
    assert _ids(await store.vector_candidates(agent_id, [1, 0, 0], 10, None)) == [three.id]
    assert await store.vector_candidates(agent_id, [1, 0, 0, 0, 0, 0, 0], 10, None) == []


# keyword search ----------------------------------------------------------------------------------------
async def test_keyword_candidates_match_any_word_and_rank_by_bm25(store: FullStore) -> None:
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


async def test_keyword_candidates_filter_by_agent_and_channel_set(store: FullStore) -> None:
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


async def test_keyword_recall_answers_as_the_search_and_then_the_fetch(store: FullStore) -> None:
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
    newest_seals = sorted((r for r in records if r.summary.startswith("harbour")), key=lambda r: r.created_at)
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
async def test_hostile_keyword_queries_are_plain_words(store: FullStore, query: str) -> None:
    agent_id = new_id()
    lake = await _add(store, _record(agent_id, "the lake at dawn"))
    hits = await store.keyword_candidates(agent_id, query, 5, None)
    assert set(_ids(hits)) <= {lake.id}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=60))
async def test_keyword_candidates_never_raise_on_any_text(store: FullStore, query: str) -> None:
    await store.keyword_candidates(new_id(), query, 5, [MAIN])


# reindex, cull, directory merges, stats ---------------------------------------------------------------
async def test_reindex_flow_and_dimension_change(store: FullStore) -> None:
    agent_id = new_id()
    bare = await _add(store, _record(agent_id, "no vector yet"))
    old = await _add(store, _record(agent_id, "old model", at=T0 + timedelta(1)), [1, 0, 0, 0], "m1")
    current = await _add(store, _record(agent_id, "new model", at=T0 + timedelta(2)), [0, 1, 0, 0], "m2")

    needing = await store.records_needing_vectors(agent_id, "m2", 10)
    assert [r.id for r in needing] == [old.id, bare.id]  # newest first
    assert len(await store.records_needing_vectors(agent_id, "m2", 1)) == 1
    assert await store.records_needing_vectors(agent_id, "m2", 0) == []

    await store.set_record_vector(agent_id, bare.id, [0, 0, 1, 0], "m2")
    await store.set_record_vector(agent_id, old.id, [0, 1, 1, 0], "m2")  # same size, replaced
    assert await store.records_needing_vectors(agent_id, "m2", 10) == []
    hits = await store.vector_candidates(agent_id, [0, 0, 1, 0], 10, None)
    assert _ids(hits) == [bare.id, old.id, current.id]
    assert len(hits) == 3  # the old vector of `old` is gone, not searched twice

    # a model of another size: the vector moves to the other dimension's index
    await store.set_record_vector(agent_id, current.id, [1, 0, 0, 0, 0, 0], "m3")
    assert _ids(await store.vector_candidates(agent_id, [0, 1, 0, 0], 10, None)) == [old.id, bare.id]
    assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0, 0, 0], 10, None)) == [current.id]
    assert [r.id for r in await store.records_needing_vectors(agent_id, "m3", 10)] == [old.id, bare.id]
    stats = await store.record_stats(agent_id)
    assert stats["vectors_by_model"] == {"m2": 2, "m3": 1}

    with pytest.raises(StoreError, match="no memory record"):
        await store.set_record_vector(agent_id, new_id(), [1, 0, 0, 0], "m2")
    with pytest.raises(StoreError, match="no memory record"):
        await store.set_record_vector(new_id(), bare.id, [1, 0, 0, 0], "m2")  # another agent's
    with pytest.raises(InputError):
        await store.set_record_vector(agent_id, bare.id, [math.nan, 0, 0, 0], "m2")
    assert _ids(await store.vector_candidates(agent_id, [0, 0, 1, 0], 1, None)) == [bare.id]


async def test_an_all_zero_vector_is_encoded_but_never_searched(store: FullStore) -> None:
    """An encoder may map text to no direction at all; the record is kept (its memory is not
    lost), never returned by vector search, and not offered again for the same model."""
    agent_id = new_id()
    blank = await _add(store, _record(agent_id, "…"), [0, 0, 0, 0], "m1")
    other = await _add(store, _record(agent_id, "something", at=T0 + timedelta(1)), [1, 0, 0, 0], "m1")
    assert await store.get_record(agent_id, blank.id) == blank
    assert _ids(await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None)) == [other.id]
    assert await store.records_needing_vectors(agent_id, "m1", 10) == []
    stats = await store.record_stats(agent_id)
    assert stats["vectors_by_model"] == {"m1": 1} and stats["without_vector"] == 1

    await store.set_record_vector(agent_id, other.id, [0.0] * 4, "m1")  # replaces it with none
    assert await store.vector_candidates(agent_id, [1, 0, 0, 0], 10, None) == []
    assert await store.records_needing_vectors(agent_id, "m1", 10) == []
    assert [r.id for r in await store.records_needing_vectors(agent_id, "m2", 10)] == [other.id, blank.id]
    await store.set_record_vector(agent_id, blank.id, [0, 1, 0, 0], "m2")
    assert _ids(await store.vector_candidates(agent_id, [0, 1, 0, 0], 10, None)) == [blank.id]


async def test_cull_candidates_need_low_importance_and_age(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    cutoff = T0 + timedelta(days=30)
    old_low = await _add(store, _record(agent_id, "old, low", importance=2))
    await _add(store, _record(agent_id, "old, high", importance=8))
    await _add(store, _record(agent_id, "old, at threshold", importance=5))
    await _add(store, _record(agent_id, "new, low", importance=2, at=cutoff + timedelta(days=1)))
    await _add(store, _record(agent_id, "exactly at cutoff", importance=1, at=cutoff))
    older_low = await _add(store, _record(agent_id, "oldest, low", importance=1, at=T0 - timedelta(1)))
    await _add(store, _record(other, "theirs, old, low", importance=1))

    found = await store.cull_candidates(agent_id, below_importance=5, older_than=cutoff)
    assert [r.id for r in found] == [older_low.id, old_low.id]  # oldest first


async def test_replace_participant_reattributes_records(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    p1, p2, p3 = new_id(), new_id(), new_id()
    a = await _add(store, _record(agent_id, "a", participants=[p1, p3]))
    b = await _add(store, _record(agent_id, "b", participants=[p3, p1, p2]))
    c = await _add(store, _record(agent_id, "c", participants=[p3]))
    theirs = await _add(store, _record(other, "theirs", participants=[p1]))

    assert await store.replace_participant(agent_id, p1, p2) == 2
    assert await store.replace_participant(agent_id, p1, p2) == 0
    assert await store.replace_participant(agent_id, p3, p3) == 0
    records = {r.id: r.participant_ids for r in await store.list_records(agent_id)}
    assert records == {a.id: (p2, p3), b.id: (p3, p2), c.id: (p3,)}
    assert await store.get_record(other, theirs.id) == theirs
    with pytest.raises(InputError):
        await store.replace_participant(agent_id, p3, "not-a-person")


async def test_record_stats(store: FullStore) -> None:
    agent_id = new_id()
    empty = await store.record_stats(agent_id)
    assert empty["count"] == 0 and empty["oldest"] is None and empty["newest"] is None
    assert empty["by_channel"] == {} and empty["without_vector"] == 0

    await _add(store, _record(agent_id, "a", importance=3, channel=MAIN), [1, 0, 0, 0], "m1")
    await _add(store, _record(agent_id, "b", importance=3, channel=SLACK, at=T0 + timedelta(1)))
    secret = _record(agent_id, "c", importance=9, channel=MAIN, at=T0 + timedelta(2))
    secret = secret.model_copy(update={"sensitivity": Sensitivity.RESTRICTED, "kind": "goal"})
    await _add(store, secret, [1, 0, 0], "m2")
    await _add(store, _record(new_id(), "someone else's"))

    stats = await store.record_stats(agent_id)
    assert stats["count"] == 3 == await store.count_records(agent_id)
    assert stats["by_channel"] == {MAIN: 2, SLACK: 1}
    assert stats["by_sensitivity"] == {"private": 2, "restricted": 1}
    assert stats["by_importance"] == {3: 2, 9: 1}
    assert stats["by_kind"] == {"exchange": 2, "goal": 1}
    assert stats["oldest"] == T0 and stats["newest"] == T0 + timedelta(2)
    assert stats["vectors_by_model"] == {"m1": 1, "m2": 1}
    assert stats["vectors_by_dims"] == {3: 1, 4: 1}
    assert stats["without_vector"] == 1


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
async def test_five_thousand_records_with_256_dimensional_vectors(store: FullStore) -> None:
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


async def test_one_large_compartment_is_searched_well_and_never_leaks(store: FullStore) -> None:
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


async def test_add_imported_writes_a_batch_whole_once_and_nothing_of_a_bad_one(store: FullStore) -> None:
    from persyn.store.base import Conversation, ImportedMemory, Message, Role

    agent_id = new_id()
    await store.ensure_agent(agent_id, "Ada", T0)
    conversation = Conversation(
        id=new_id(T0),
        agent_id=agent_id,
        service="import",
        channel="discord:general#r1",
        participant_ids=(),
        started_at=T0,
        last_activity_at=T0 + timedelta(seconds=1),
        closed_at=T0 + timedelta(seconds=1),
        kind="imported",
    )
    said = [
        Message(
            id=new_id(T0 + timedelta(seconds=i)),
            agent_id=agent_id,
            conversation_id=conversation.id,
            role=Role.AGENT,
            person_id=None,
            speaker_name="Ada",
            text=f"line {i}",
            created_at=T0 + timedelta(seconds=i),
            event_id=None,
        )
        for i in range(2)
    ]
    record = _record(agent_id, "I imported this.", ref="r1").model_copy(
        update={"conversation_id": conversation.id, "message_ids": tuple(m.id for m in said)}
    )
    item = ImportedMemory(record, [1, 0, 0, 0], conversation, said, (("imported:" + conversation.id, "yes"),))
    bad = ImportedMemory(_record(agent_id, "bad", participants=["not-a-ulid"]))
    with pytest.raises(InputError, match="participant id"):
        await store.add_imported([item, bad], MODEL)
    assert await store.get_conversation(agent_id, conversation.id) is None
    assert await store.count_messages(agent_id) == 0 and await store.count_records(agent_id) == 0
    assert await store.add_imported([item], MODEL) == [True]
    assert await store.add_imported([item], MODEL) == [False]  # a re-run changes nothing
    stored = await store.get_conversation(agent_id, conversation.id)
    assert stored is not None and stored.closed_at == conversation.closed_at and stored.kind == "imported"
    assert [m.id for m in await store.recent_messages(agent_id, conversation.id, 10)] == [m.id for m in said]
    assert await store.get_flag(agent_id, "imported:" + conversation.id) == "yes"
    # Remembered at import: its consolidation is done, never to run on it.
    state = await store.get_consolidation(agent_id, conversation.id)
    assert state is not None and (state.status, state.detail) == (ConsolidationStatus.DONE, "imported")
    assert await store.count_records(agent_id) == 1
    assert await store.link_record_messages(agent_id, record.id, [said[0].id])
    linked = await store.get_record(agent_id, record.id)
    assert linked is not None and linked.message_ids == (said[0].id,)
    assert not await store.link_record_messages(agent_id, new_id(), [])
