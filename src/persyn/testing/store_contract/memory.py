"""What every storage backend must do for long-term memory (SPEC §4.1, §5; the `Store` port's
"long-term memory" methods). Runs once per backend through the `store` fixture. Vectors are
hand-made (4-d unless a test says otherwise), times come from fixed instants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError, StoreError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity, channel_key
from persyn.store.base import RecallCandidate
from persyn.store.capabilities import FullStore
from persyn.store.ports.jobs import ConsolidationStatus
from persyn.testing.store_contract.base import Contract

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


class MemoryContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    # records ------------------------------------------------------------------------------------------
    async def test_a_record_round_trips_every_field(self, store: FullStore) -> None:
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

    async def test_add_record_deduplicates_on_id_and_on_ref_per_agent(self, store: FullStore) -> None:
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

    async def test_add_record_rejects_bad_input_and_stores_nothing(self, store: FullStore) -> None:
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

    async def test_add_records_stores_a_batch_as_add_record_would_one_by_one(self, store: FullStore) -> None:
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
        self, store: FullStore, problem: str
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

    async def test_records_by_ids_returns_those_that_exist_for_the_agent(self, store: FullStore) -> None:
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
        assert sorted((c.record() for c in candidates), key=lambda r: r.id) == sorted(
            found, key=lambda r: r.id
        )
        assert await store.recall_candidates(agent_id, []) == []
        assert [c.id for c in await store.recall_candidates(agent_id, many)] == [mine[1].id]

    async def test_list_records_pages_newest_first(self, store: FullStore) -> None:
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

    async def test_delete_records_removes_them_from_vector_and_keyword_search(self, store: FullStore) -> None:
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

    # reindex, cull, directory merges, stats ---------------------------------------------------------------
    async def test_reindex_flow_and_dimension_change(self, store: FullStore) -> None:
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

    async def test_an_all_zero_vector_is_encoded_but_never_searched(self, store: FullStore) -> None:
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

    async def test_cull_candidates_need_low_importance_and_age(self, store: FullStore) -> None:
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

    async def test_replace_participant_reattributes_records(self, store: FullStore) -> None:
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

    async def test_record_stats(self, store: FullStore) -> None:
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

    async def test_add_imported_writes_a_batch_whole_once_and_nothing_of_a_bad_one(
        self, store: FullStore
    ) -> None:
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
        item = ImportedMemory(
            record, [1, 0, 0, 0], conversation, said, (("imported:" + conversation.id, "yes"),)
        )
        bad = ImportedMemory(_record(agent_id, "bad", participants=["not-a-ulid"]))
        with pytest.raises(InputError, match="participant id"):
            await store.add_imported([item, bad], MODEL)
        assert await store.get_conversation(agent_id, conversation.id) is None
        assert await store.count_messages(agent_id) == 0 and await store.count_records(agent_id) == 0
        assert await store.add_imported([item], MODEL) == [True]
        assert await store.add_imported([item], MODEL) == [False]  # a re-run changes nothing
        stored = await store.get_conversation(agent_id, conversation.id)
        assert stored is not None and stored.closed_at == conversation.closed_at and stored.kind == "imported"
        assert [m.id for m in await store.recent_messages(agent_id, conversation.id, 10)] == [
            m.id for m in said
        ]
        assert await store.get_flag(agent_id, "imported:" + conversation.id) == "yes"
        # Remembered at import: its consolidation is done, never to run on it.
        state = await store.get_consolidation(agent_id, conversation.id)
        assert state is not None and (state.status, state.detail) == (ConsolidationStatus.DONE, "imported")
        assert await store.count_records(agent_id) == 1
        assert await store.link_record_messages(agent_id, record.id, [said[0].id])
        linked = await store.get_record(agent_id, record.id)
        assert linked is not None and linked.message_ids == (said[0].id,)
        assert not await store.link_record_messages(agent_id, new_id(), [])
