"""Scoring math, bands and budget packing (memory/retrieval.py pure helpers)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from persyn.core.config import RetrievalWeights
from persyn.core.records import MemoryRecord, RelevanceBand
from persyn.memory.retrieval import (
    Components,
    band_for,
    estimate_tokens,
    fused_score,
    importance_component,
    keyword_components,
    memory_line,
    pack,
    participant_component,
    recency_component,
    similarity_component,
    spread_over_episodes,
)

unit = st.floats(min_value=0.0, max_value=1.0)
weight = st.floats(min_value=0.0, max_value=10.0)
maybe_unit = st.one_of(st.none(), unit)
components = st.builds(
    Components,
    similarity=unit,
    keyword=unit,
    recency=unit,
    importance=unit,
    participants=maybe_unit,
    date=maybe_unit,
)
weights = st.builds(
    RetrievalWeights,
    similarity=weight,
    keyword=weight,
    recency=weight,
    participants=weight,
    importance=weight,
    date=weight,
)
FIELDS = ("similarity", "keyword", "recency", "importance", "participants", "date")


@given(components, weights)
def test_fused_score_is_normalised(parts: Components, w: RetrievalWeights) -> None:
    assert 0.0 <= fused_score(parts, w) <= 1.0


@given(components, weights, st.sampled_from(FIELDS), unit)
def test_fused_score_never_falls_when_a_component_rises(
    parts: Components, w: RetrievalWeights, field: str, bump: float
) -> None:
    current = getattr(parts, field)
    assume(current is not None)
    higher = dataclasses.replace(parts, **{field: min(1.0, current + bump)})
    assert fused_score(higher, w) >= fused_score(parts, w) - 1e-12


@given(weights)
def test_perfect_and_empty_records_score_one_and_zero(w: RetrievalWeights) -> None:
    assume(w.similarity + w.keyword + w.recency + w.importance + w.participants + w.date > 0)
    top = Components(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    bottom = Components(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert fused_score(top, w) == pytest.approx(1.0)
    assert fused_score(bottom, w) == 0.0


def test_a_single_signal_cannot_make_a_strong_memory() -> None:
    w = RetrievalWeights()
    keyword_only = Components(similarity=0.0, keyword=1.0, recency=1.0, importance=1.0, participants=1.0)
    assert band_for(fused_score(keyword_only, w), 0.6, 0.35) is not RelevanceBand.STRONG
    both = Components(similarity=0.9, keyword=0.9, recency=0.5, importance=0.5, participants=1.0)
    assert band_for(fused_score(both, w), 0.6, 0.35) is RelevanceBand.STRONG


@given(st.floats(min_value=-1, max_value=1), st.floats(min_value=-1, max_value=1), st.floats(-1, 1))
def test_similarity_component_is_clamped_and_monotonic(a: float, b: float, floor: float) -> None:
    ceiling = min(1.0, floor + 0.5)
    lo, hi = sorted((a, b))
    assert 0.0 <= similarity_component(lo, floor, ceiling) <= similarity_component(hi, floor, ceiling) <= 1.0
    assert similarity_component(None, floor, ceiling) == 0.0
    assert similarity_component(float("nan"), floor, ceiling) == 0.0


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.floats(allow_nan=True)), unit)
def test_keyword_components_are_relative_to_the_best_and_scaled_by_coverage(
    bm25: dict[str, float], coverage: float
) -> None:
    scored = keyword_components(bm25, coverage)
    assert set(scored) == set(bm25)
    assert all(0.0 <= v <= 1.0 for v in scored.values())
    finite = {k: v for k, v in bm25.items() if v == v and v > 0 and v != float("inf")}
    if finite:
        best = max(finite, key=lambda k: finite[k])
        assert scored[best] == pytest.approx(coverage)
        ordered = sorted(finite, key=lambda k: finite[k])
        assert [scored[k] for k in ordered] == sorted(scored[k] for k in ordered)


@given(st.integers(0, 3650), st.integers(0, 3650), st.floats(min_value=0.5, max_value=365))
def test_recency_decays_with_age(younger: int, older: int, half_life: float) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    a, b = sorted((younger, older))
    fresh = recency_component(now - timedelta(days=a), now, half_life)
    stale = recency_component(now - timedelta(days=b), now, half_life)
    assert 0.0 <= stale <= fresh <= 1.0
    assert recency_component(now + timedelta(days=3), now, half_life) == 1.0
    assert recency_component(now - timedelta(days=half_life), now, half_life) == pytest.approx(0.5)


def test_participants_and_importance_components() -> None:
    assert participant_component(["a", "b"], ["a", "c"]) == 0.5
    assert participant_component(["a", "b"], ["a", "b"]) == 1.0
    assert participant_component(["a"], []) is None
    assert importance_component(1) == 0.0
    assert importance_component(10) == 1.0


@given(unit, st.floats(0, 1), st.floats(0, 1))
def test_bands_follow_the_thresholds(score: float, t1: float, t2: float) -> None:
    moderate, strong = sorted((t1, t2))
    band = band_for(score, strong, moderate)
    expected = (
        RelevanceBand.STRONG
        if score >= strong
        else RelevanceBand.MODERATE
        if score >= moderate
        else RelevanceBand.WEAK
    )
    assert band is expected


@given(unit, unit)
def test_bands_are_monotonic_in_the_score(a: float, b: float) -> None:
    order = [RelevanceBand.WEAK, RelevanceBand.MODERATE, RelevanceBand.STRONG]
    lo, hi = sorted((a, b))
    assert order.index(band_for(lo, 0.6, 0.35)) <= order.index(band_for(hi, 0.6, 0.35))


@given(st.lists(st.integers(0, 500)), st.integers(-5, 3000))
def test_pack_is_the_longest_fitting_best_first_prefix(sizes: list[int], budget: int) -> None:
    ranked = list(enumerate(sizes))  # (rank, tokens)
    packed = pack(ranked, lambda item: item[1], budget)
    assert packed == ranked[: len(packed)]  # best-first order kept, nothing skipped
    assert sum(t for _, t in packed) <= max(budget, 0) or (budget < 0 and not packed)
    if len(packed) < len(ranked):  # the next one would not have fitted
        assert sum(t for _, t in packed) + ranked[len(packed)][1] > budget


def test_estimate_tokens_is_chars_over_four_rounded_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_memory_line_shows_band_friendly_date_emotion_and_id() -> None:
    record = MemoryRecord(
        id="01JNQ8Z6K00000000000000000",
        agent_id="01J0000000000000000000AGNT",
        created_at=datetime(2026, 3, 4, 18, 30, tzinfo=UTC),
        channel="terminal:terminal",
        summary="I helped Ann\nplan her trip.",
        emotion="curious",
    )
    now = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)
    assert memory_line(record, RelevanceBand.STRONG, now) == (
        "[strong] (Wed 4 Mar 2026, 3 days ago; felt curious; ref 01JNQ8Z6K00000000000000000) "
        "I helped Ann plan her trip."
    )


# spreading a ranking over episodes ---------------------------------------------------------------
ranked_items = st.lists(
    st.tuples(st.floats(min_value=0.01, max_value=1.0), st.integers(min_value=0, max_value=4)), max_size=30
).map(lambda items: sorted(items, key=lambda item: -item[0]))


@given(ranked_items, st.floats(min_value=0.05, max_value=1.0), st.integers(min_value=0, max_value=40))
def test_spreading_keeps_the_best_first_and_only_reorders(
    ranked: list[tuple[float, int]], penalty: float, k: int
) -> None:
    spread = spread_over_episodes(ranked, lambda item: item[0], lambda item: item[1], penalty, k)
    assert len(spread) == min(k, len(ranked))
    if spread:
        assert spread[0] == ranked[0]
    pool = list(ranked)
    for item in spread:  # a sub-multiset of the ranking: nothing invented, nothing twice
        pool.remove(item)
    if penalty == 1.0:
        assert spread == ranked[:k]


@given(ranked_items, st.integers(min_value=1, max_value=40))
def test_a_strong_penalty_puts_one_of_each_episode_first(ranked: list[tuple[float, int]], k: int) -> None:
    spread = spread_over_episodes(ranked, lambda item: item[0], lambda item: item[1], 0.001, k)
    episodes = list(dict.fromkeys(item[1] for item in ranked))
    distinct = min(k, len(episodes))
    assert len({item[1] for item in spread[:distinct]}) == distinct
    # Within an episode the given order holds.
    for episode in episodes:
        mine = [item for item in spread if item[1] == episode]
        assert mine == [item for item in ranked if item[1] == episode][: len(mine)]


def test_a_second_memory_of_one_episode_yields_to_a_nearly_as_good_other() -> None:
    ranked = [(0.9, "monday"), (0.85, "monday"), (0.8, "tuesday"), (0.5, "tuesday")]
    spread = spread_over_episodes(ranked, lambda item: item[0], lambda item: item[1], 0.8, 3)
    assert spread == [(0.9, "monday"), (0.8, "tuesday"), (0.85, "monday")]  # 0.85 * 0.8 = 0.68 < 0.8
