"""The Retriever over the real SQLite store: ranking, bands, packing, degradation, and the
access policy end to end (nothing ever surfaces outside its compartment or policy)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persyn.core.config import MemoryConfig
from persyn.core.ids import derived_id, new_id
from persyn.core.records import MemoryRecord, RelevanceBand, Sensitivity
from persyn.memory.embedder import Embedder, OpenAICompatibleEmbedder
from persyn.memory.retrieval import RetrievalResult, Retriever, format_memories
from persyn.store import open_store
from persyn.store.capabilities import FullStore
from persyn.testing.embedder import HashEmbedder, UnavailableEmbedder

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
HERE = "terminal:terminal"
ANN, BO, CY = (derived_id(NOW, "person", name) for name in ("ann", "bo", "cy"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def any_store(store_url: str) -> AsyncIterator[FullStore]:
    """A store of each backend (tests/conftest.py): the access rules' SQL form must give
    exactly the policy on every one."""
    opened = open_store(store_url)
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


async def _agent(store: FullStore) -> str:
    agent_id = new_id(NOW)
    await store.ensure_agent(agent_id, "Ada", NOW)
    return agent_id


async def _remember(
    store: FullStore,
    agent_id: str,
    summary: str,
    *,
    days_ago: float = 1,
    channel: str = HERE,
    participants: Sequence[str] = (ANN,),
    sensitivity: Sensitivity = Sensitivity.PRIVATE,
    importance: int = 5,
    embedder: Embedder | None = None,
) -> MemoryRecord:
    at = NOW - timedelta(days=days_ago)
    record = MemoryRecord(
        id=derived_id(at, agent_id, summary, channel, sensitivity.value, *participants),
        agent_id=agent_id,
        created_at=at,
        channel=channel,
        participant_ids=tuple(participants),
        summary=summary,
        importance=importance,
        sensitivity=sensitivity,
    )
    vector = (await (embedder or HashEmbedder()).embed([summary]))[0]
    assert await store.add_record(record, vector, (embedder or HashEmbedder()).name)
    return record


async def _recall(
    retriever: Retriever, agent_id: str, query: str, *, present: Sequence[str] = (ANN,), **options: object
) -> RetrievalResult:
    return await retriever.retrieve(
        agent_id,
        query,
        channel=str(options.pop("channel", HERE)),
        participants=present,
        now=NOW,
        budget_tokens=int(options.pop("budget", 10_000)),  # pyright: ignore[reportArgumentType]
        **options,  # pyright: ignore[reportArgumentType]
    )


async def test_the_relevant_memory_comes_first_with_a_band_and_its_id(store: FullStore) -> None:
    agent = await _agent(store)
    hike = await _remember(store, agent, "I helped Ann plan a hiking trip on the Kesch ridge.")
    await _remember(store, agent, "Ann and I sorted out her tax forms for the accountant.")
    await _remember(store, agent, "We talked about sourdough starters and rye flour.")
    result = await _recall(Retriever(store, HashEmbedder(), MemoryConfig()), agent, "the ridge hiking trip")
    assert result.records[0].record.id == hike.id
    assert result.degraded is None
    assert [s.score for s in result.records] == sorted((s.score for s in result.records), reverse=True)
    assert all(0.0 <= s.score <= 1.0 for s in result.records)
    assert result.records[0].band is not RelevanceBand.WEAK
    text = format_memories(result)
    assert text.splitlines()[0].startswith(
        f"[{result.records[0].band.value}] (Mon 9 Mar 2026, yesterday; ref {hike.id})"
    )


async def test_packing_keeps_the_best_and_respects_the_budget(store: FullStore) -> None:
    agent = await _agent(store)
    for index in range(12):
        await _remember(
            store, agent, f"Ann and I went hiking, trip number {index}, a long day out.", days_ago=index
        )
    retriever = Retriever(store, HashEmbedder(), MemoryConfig())
    full = await _recall(retriever, agent, "hiking trip")
    assert len(full.records) == 12
    budget = sum(s.tokens for s in full.records[:5]) + 3
    packed = await _recall(retriever, agent, "hiking trip", budget=budget)
    assert [s.record.id for s in packed.records] == [s.record.id for s in full.records[:5]]
    assert packed.tokens <= budget and packed.over_budget == 7
    limited = await _recall(retriever, agent, "hiking trip", limit=3)
    assert [s.record.id for s in limited.records] == [s.record.id for s in full.records[:3]]


@pytest.mark.parametrize(
    "embedder",
    [None, UnavailableEmbedder(), "dead-service"],
    ids=["no-encoder", "encoder-raises", "dead-service"],
)
async def test_an_unavailable_encoder_degrades_to_keyword_recall(store: FullStore, embedder: object) -> None:
    agent = await _agent(store)
    hike = await _remember(store, agent, "I helped Ann plan a hiking trip on the Kesch ridge.")
    await _remember(store, agent, "Ann and I sorted out her tax forms.")
    if embedder == "dead-service":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        embedder = OpenAICompatibleEmbedder("m", f"http://127.0.0.1:{port}/v1", timeout_seconds=1)
    assert embedder is None or isinstance(embedder, Embedder)
    result = await _recall(Retriever(store, embedder, MemoryConfig()), agent, "the ridge hiking trip")
    assert result.degraded is not None and "keyword-only" in result.degraded
    assert [s.record.id for s in result.records] == [hike.id]
    # Found one way only, it is never asserted as a strong memory.
    assert result.records[0].band is not RelevanceBand.STRONG
    assert format_memories(result).startswith("(recall is partial right now: ")


async def test_modes_search_one_way_only(store: FullStore) -> None:
    agent = await _agent(store)
    await _remember(store, agent, "I helped Ann plan a hiking trip.")
    retriever = Retriever(store, HashEmbedder(), MemoryConfig())
    keyword = await _recall(retriever, agent, "hiking", mode="keyword")
    vector = await _recall(retriever, agent, "hiking", mode="vector")
    assert keyword.records[0].similarity is None and keyword.records[0].keyword
    assert vector.records[0].similarity is not None and vector.records[0].keyword is None


async def test_a_date_in_the_query_finds_what_happened_then(store: FullStore) -> None:
    agent = await _agent(store)
    wide = HashEmbedder(dims=2048)  # no hash collisions between these words
    yesterday = await _remember(store, agent, "Ann showed me photos of her garden.", embedder=wide)
    for days, word in ((3, "three"), (6, "six"), (9, "nine"), (12, "twelve")):
        text = f"Ann and I chatted about the weather, {word} days back."
        await _remember(store, agent, text, days_ago=days, embedder=wide)
    retriever = Retriever(store, wide, MemoryConfig(min_score=0))
    result = await _recall(retriever, agent, "what did we talk about yesterday?")
    assert result.records[0].record.id == yesterday.id
    dated = await _recall(retriever, agent, "what happened on 9 March 2026?")
    assert dated.records[0].record.id == yesterday.id


async def test_other_agents_and_channels_are_invisible(store: FullStore) -> None:
    agent, other = await _agent(store), await _agent(store)
    await _remember(store, other, "Ann's hiking trip, as the other agent remembers it.")
    elsewhere = await _remember(
        store, agent, "Ann's hiking trip, told on another channel.", channel="web:chat"
    )
    retriever = Retriever(store, HashEmbedder(), MemoryConfig())
    assert (await _recall(retriever, agent, "hiking trip")).records == ()
    grouped = Retriever(store, HashEmbedder(), MemoryConfig(channel_groups=[[HERE, "web:chat"]]))
    assert [s.record.id for s in (await _recall(grouped, agent, "hiking trip")).records] == [elsewhere.id]


# the policy end to end ---------------------------------------------------------------------------
CHANNELS = [HERE, "discord:dm-ann", "discord:general", "web:chat"]
PEOPLE = [ANN, BO, CY]

memories = st.lists(
    st.tuples(
        st.sampled_from(CHANNELS),
        st.lists(st.sampled_from(PEOPLE), max_size=3, unique=True),
        st.sampled_from(list(Sensitivity)),
    ),
    min_size=1,
    max_size=12,
)
situations = st.tuples(
    st.sampled_from(CHANNELS),
    st.lists(st.sampled_from(PEOPLE), max_size=3, unique=True),
    st.lists(st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=3, unique=True), max_size=2),
)


def _allowed(
    record: MemoryRecord, channel: str, present: Sequence[str], groups: Sequence[Sequence[str]]
) -> bool:
    """The documented policy, restated independently of memory/access.py."""
    if record.channel not in {channel} | {c for g in groups if channel in g for c in g}:
        return False
    now, then = set(present), set(record.participant_ids)
    same_room = record.channel == channel
    return {
        Sensitivity.PUBLIC: True,
        Sensitivity.PRIVATE: now <= then,
        Sensitivity.CONFIDENTIAL: now <= then and same_room,
        Sensitivity.RESTRICTED: now == then and same_room,
    }[record.sensitivity]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(memories, situations)
async def test_recall_surfaces_exactly_what_the_policy_allows(
    any_store: FullStore,
    formed: list[tuple[str, list[str], Sensitivity]],
    situation: tuple[str, list[str], list[list[str]]],
) -> None:
    channel, present, groups = situation
    agent = await _agent(any_store)  # a fresh agent per example: examples never see each other
    records = [
        await _remember(
            any_store,
            agent,
            f"I talked about apples, memory {i}.",
            channel=c,
            participants=p,
            sensitivity=s,
            days_ago=i,
        )
        for i, (c, p, s) in enumerate(formed)
    ]
    config = MemoryConfig(channel_groups=groups, min_score=0.0)
    result = await _recall(
        Retriever(any_store, HashEmbedder(), config), agent, "apples", present=present, channel=channel
    )
    surfaced = {s.record.id for s in result.records}
    assert surfaced == {r.id for r in records if _allowed(r, channel, present, groups)}


async def test_an_agent_with_no_memories_is_not_searched_until_it_has_one(store: FullStore) -> None:
    """Recall for a new agent costs no embedding; the first record, however it arrives, is
    found on the next turn."""
    agent = await _agent(store)
    encoder = HashEmbedder()
    retriever = Retriever(store, encoder, MemoryConfig())
    empty = await _recall(retriever, agent, "the ridge hiking trip")
    assert (empty.records, empty.degraded, empty.considered, encoder.calls) == ((), None, 0, 0)
    assert await retriever.has_memories(agent) is False
    hike = await _remember(store, agent, "I helped Ann plan a hiking trip on the Kesch ridge.")
    found = await _recall(retriever, agent, "the ridge hiking trip")
    assert [s.record.id for s in found.records] == [hike.id] and encoder.calls == 1
    assert await retriever.has_memories(agent) is True


async def test_with_no_memories_and_no_encoder_recall_still_says_it_is_degraded(store: FullStore) -> None:
    agent = await _agent(store)
    result = await _recall(Retriever(store, None, MemoryConfig()), agent, "the ridge hiking trip")
    assert result.records == () and result.degraded is not None and "keyword-only" in result.degraded


async def test_after_a_merge_memories_of_either_identity_are_recalled_for_the_survivor(
    store: FullStore,
) -> None:
    """Issue 5: the participant match and the access policy use the unified person id, so a
    contact folded from two records is recognised on both channels."""
    from persyn.store import Identity

    agent_id = await _agent(store)
    slack = "slack:general"
    sam = await store.resolve_person(
        agent_id, Identity(service="terminal", channel="terminal", speaker_id="sam"), "Sam", "human", NOW
    )
    samuel = await store.resolve_person(
        agent_id, Identity(service="slack", channel="general", speaker_id="U1"), "samuel", "human", NOW
    )
    on_terminal = await _remember(
        store, agent_id, "Sam told me about his cello lessons.", participants=(sam.id,)
    )
    on_slack = await _remember(
        store, agent_id, "Samuel shared his cello practice plan.", channel=slack, participants=(samuel.id,)
    )
    retriever = Retriever(store, HashEmbedder(), MemoryConfig(min_score=0.0))
    # Before: the private slack memory is Samuel's, and Sam (as far as the agent knows) is not Samuel.
    before = await _recall(retriever, agent_id, "cello practice", present=(sam.id,), channel=slack)
    assert on_slack.id not in [s.record.id for s in before.records]

    await store.merge_persons(agent_id, sam.id, samuel.id)

    after_slack = await _recall(retriever, agent_id, "cello practice", present=(sam.id,), channel=slack)
    after_terminal = await _recall(retriever, agent_id, "cello lessons", present=(sam.id,), channel=HERE)
    assert on_slack.id in [s.record.id for s in after_slack.records]
    assert on_terminal.id in [s.record.id for s in after_terminal.records]
