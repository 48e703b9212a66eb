"""Recall: which memories come to mind for an input (SPEC §4 step 2).

For one query the retriever
1. asks the store for candidates two ways — nearest vectors to the query's embedding and
   BM25 keyword matches — both restricted to the compartment (`access.eligible_channels`);
2. drops every record the sensitivity policy withholds from the people present now
   (`access.may_surface`);
3. scores each candidate with a weighted relevance function (`fused_score`) of
   - semantic similarity: the query/record cosine, calibrated to [0, 1] between
     `similarity_floor` (unrelated text) and `similarity_ceiling` (a near paraphrase);
   - keyword match: the record's BM25 relative to the best match, scaled by how many of the
     query's content words that best match contains — so a single stray shared word is not
     read as a perfect keyword hit;
   - temporal decay of the record's age: 0.5 ** (age / half-life);
   - participant match: the share of the people present now who took part;
   - importance: the record's 1–10 rating mapped to [0, 1];
   - date match, only when the query names a date or period ("on 4 March", "last week",
     "in 2023"): 1 inside it, decaying outside;
   the score is the weighted mean, so it lies in [0, 1]; similarity and keyword weigh in
   even when absent, so a record found one way only, or keyword-only recall with the
   encoder down, cannot reach "strong" on a single signal;
4. spreads the top of the ranking over episodes (`spread_over_episodes`: each further record
   of the same channel and day counts `episode_penalty` of its score, compounding), so one
   conversation's records do not crowd out the others a question needs;
5. bands each score (strong / moderate / weak) by the configured thresholds and packs the
   records best-first until their estimated prompt size (chars / 4) would pass the budget.

Scores are query-time annotations: nothing is written back (SPEC §5). Query processing
(stop-word removal, date expressions) is in `_query.py`; the measured effect of each choice
is in `bench/locomo.py`'s docstring.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from ulid import ULID

from persyn.core.config import MemoryConfig, RetrievalWeights
from persyn.core.errors import StoreError
from persyn.core.records import MemoryRecord, RelevanceBand, ScoredRecord
from persyn.memory._query import (
    MONTH_NAMES,
    WEEKDAY_NAMES,
    AnalysedQuery,
    Period,
    analyse_query,
    content_terms,
    period_match,
)
from persyn.memory.access import eligible_channels, may_surface
from persyn.memory.embedder import Embedder, SentenceReader
from persyn.store.base import RecallCandidate, RecallHits
from persyn.store.ports.memory import MemoryPort

__all__ = [
    "PARTIAL_NOTE",
    "Components",
    "Mode",
    "RetrievalResult",
    "Retriever",
    "band_for",
    "estimate_tokens",
    "format_memories",
    "friendly_when",
    "fused_score",
    "importance_component",
    "keyword_components",
    "memory_line",
    "pack",
    "participant_component",
    "recency_component",
    "similarity_component",
    "spread_over_episodes",
]

log = logging.getLogger(__name__)

Mode = Literal["hybrid", "vector", "keyword"]
T = TypeVar("T")
_MAX_ULID_SECONDS = (2**48 - 1) / 1000


# scoring helpers (pure) --------------------------------------------------------------------------
@dataclass(frozen=True)
class Components:
    """The per-record signals, each in [0, 1]. `None` = not applicable to this query (nobody
    present; no date in the query); a missing similarity or keyword match is 0, not None."""

    similarity: float = 0.0
    keyword: float = 0.0
    recency: float = 0.0
    importance: float = 0.0
    participants: float | None = None
    date: float | None = None


def fused_score(components: Components, weights: RetrievalWeights) -> float:
    """The weighted mean of the applicable components: in [0, 1], non-decreasing in each."""
    terms: list[tuple[float, float]] = [
        (weights.similarity, components.similarity),
        (weights.keyword, components.keyword),
        (weights.recency, components.recency),
        (weights.importance, components.importance),
    ]
    if components.participants is not None:
        terms.append((weights.participants, components.participants))
    if components.date is not None:
        terms.append((weights.date, components.date))
    # Lists, not generators: recall scores every candidate, and this is its inner loop.
    total = math.fsum([w for w, _ in terms])
    if total <= 0.0:
        return 0.0
    score = math.fsum([w * _unit(value) for w, value in terms]) / total
    return _unit(score)


def similarity_component(cosine: float | None, floor: float, ceiling: float) -> float:
    """A cosine mapped linearly from [floor, ceiling] to [0, 1] (clamped). The encoder's
    cosines are not probabilities: unrelated texts still score ~0.1 with WordLlama."""
    if cosine is None or not math.isfinite(cosine):
        return 0.0
    if ceiling <= floor:
        return 1.0 if cosine >= ceiling else 0.0
    return _unit((cosine - floor) / (ceiling - floor))


def keyword_components(bm25: Mapping[str, float], best_coverage: float) -> dict[str, float]:
    """BM25 scores (higher = better) relative to the best, times the share of the query's
    content words the best match contains (`best_coverage`). BM25 has no absolute scale,
    so the best match anchors it; the coverage keeps that anchor honest."""
    positive = [s for s in bm25.values() if math.isfinite(s) and s > 0.0]
    if not positive:
        return dict.fromkeys(bm25, 0.0)
    best = max(positive)
    scale = _unit(best_coverage)
    return {rid: _unit(s / best) * scale if math.isfinite(s) and s > 0 else 0.0 for rid, s in bm25.items()}


def recency_component(created_at: datetime, now: datetime, half_life_days: float) -> float:
    """Temporal decay: 1 for a record formed now (or in the future), halving every half-life."""
    age_days = (_aware(now) - _aware(created_at)).total_seconds() / 86_400
    if age_days <= 0:
        return 1.0
    return _unit(0.5 ** (age_days / half_life_days))


def participant_component(record_participants: Sequence[str], present: Sequence[str]) -> float | None:
    """The share of the people present now who appear in the record; None with nobody present."""
    people = set(present)
    if not people:
        return None
    return len(people & set(record_participants)) / len(people)


def importance_component(importance: int) -> float:
    return _unit((importance - 1) / 9)


def band_for(score: float, strong_threshold: float, moderate_threshold: float) -> RelevanceBand:
    if score >= strong_threshold:
        return RelevanceBand.STRONG
    if score >= moderate_threshold:
        return RelevanceBand.MODERATE
    return RelevanceBand.WEAK


def estimate_tokens(text: str) -> int:
    """Cheap token estimate (SPEC §7): four characters a token, rounded up."""
    return math.ceil(len(text) / 4)


def pack(ranked: Sequence[T], tokens_of: Callable[[T], int], budget_tokens: int) -> list[T]:
    """The longest best-first prefix of `ranked` whose tokens fit in `budget_tokens`.

    Never exceeds the budget (a first record bigger than the whole budget means nothing is
    packed) and never skips a better record to fit a worse one: what surfaces is always the
    top of the ranking.
    """
    packed: list[T] = []
    used = 0
    for item in ranked:
        cost = tokens_of(item)
        if used + cost > budget_tokens:
            break
        packed.append(item)
        used += cost
    return packed


def spread_over_episodes(
    ranked: Sequence[T],
    score_of: Callable[[T], float],
    episode_of: Callable[[T], object],
    penalty: float,
    k: int,
) -> list[T]:
    """The first `k` of `ranked` (best first) re-ordered so one episode does not fill them:
    an item counts `score * penalty ** n`, n = how many items of its episode are already
    placed. With `penalty` 1 the order is `ranked`'s; the first item is always the best.

    Several memories of one conversation, each a near-copy of the others' topic, otherwise
    fill the top and crowd out the conversation that answers: on LoCoMo (bench/locomo.py)
    penalty 0.8 lifted recall_all@5 on observations 0.759 -> 0.776, mostly single-hop
    questions whose top five had been one wrong session's; with the raw dialog merged in,
    0.6 (the default) lifted it again, 0.800 -> 0.804. Greedy over a heap of each
    episode's best remaining item: O((n + k) log n)."""
    if penalty >= 1.0 or k <= 1:
        return list(ranked[:k])
    # Each episode's items as (position in `ranked`, item), in `ranked`'s order; the
    # position breaks ties, so equal effective scores keep the given order.
    queues: dict[object, list[tuple[int, T]]] = {}
    for position, item in enumerate(ranked):
        queues.setdefault(episode_of(item), []).append((position, item))
    episodes = list(queues.values())
    # (-effective score, position, episode, how many of it are placed)
    heap = [(-score_of(items[0][1]), items[0][0], e, 0) for e, items in enumerate(episodes)]
    heapq.heapify(heap)
    placed: list[T] = []
    while heap and len(placed) < k:
        _, _, episode, taken = heapq.heappop(heap)
        items = episodes[episode]
        placed.append(items[taken][1])
        if taken + 1 < len(items):
            position, following = items[taken + 1]
            effective = score_of(following) * penalty ** (taken + 1)
            heapq.heappush(heap, (-effective, position, episode, taken + 1))
    return placed


def _unit(value: float) -> float:
    if not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, value))


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


# prompt lines --------------------------------------------------------------------------------------
_SPACE = re.compile(r"\s+")


def memory_line(record: MemoryRecord, band: RelevanceBand, now: datetime) -> str:
    """`[strong] (Wed 4 Mar 2026, 3 days ago; felt curious; ref 01J…) I …` — the band the
    agent must calibrate its wording to, a friendly date, and the id the critic checks
    claims against (and "remember harder" pulls the dialog by)."""
    details = [friendly_when(record.created_at, now)]
    if record.emotion:
        details.append(f"felt {record.emotion}")
    details.append(f"ref {record.id}")
    summary = _SPACE.sub(" ", record.summary).strip()
    return f"[{band.value}] ({'; '.join(details)}) {summary}"


def friendly_when(when: datetime, now: datetime) -> str:
    """`Wed 4 Mar 2026, 3 days ago`."""
    when = _aware(when)
    day = f"{WEEKDAY_NAMES[when.weekday()][:3]} {when.day} {MONTH_NAMES[when.month - 1][:3]} {when.year}"
    return f"{day}, {_ago(when, _aware(now))}"


def _ago(when: datetime, now: datetime) -> str:
    days = (now.date() - when.date()).days
    if days < 0:
        return "upcoming"
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    for size, unit in ((365, "year"), (30, "month"), (7, "week")):
        if days >= size * (2 if unit != "week" else 1):
            count = days // size
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return f"{days} days ago"


# retrieval ------------------------------------------------------------------------------------------
class RetrievalResult(BaseModel):
    """What came to mind for one query, best first, already packed into the budget."""

    model_config = ConfigDict(frozen=True)

    query: str
    channel: str
    now: datetime
    mode: Mode
    records: tuple[ScoredRecord, ...] = ()
    # Each record's score parts, in the order of `records` (`persyn memory recall --explain`).
    components: tuple[Components, ...] = ()
    degraded: str | None = None  # why recall ran on less than it was asked to (encoder down)
    considered: int = 0  # candidates found in the compartment
    withheld: int = 0  # of those, hidden by the sensitivity policy
    over_budget: int = 0  # ranked records that did not fit the token budget or limit
    budget_tokens: int = 0
    periods: tuple[Period, ...] = ()  # date expressions read from the query

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.records)


def format_memories(result: RetrievalResult) -> str:
    """The memories for the prompt, one line each (see `memory_line`); empty when none.
    A degraded recall says so first, so the agent knows its recall was partial (the raw
    reason — URLs, exception text — stays in `result.degraded`, out of the prompt)."""
    lines = [memory_line(s.record, s.band, result.now) for s in result.records]
    if result.degraded and lines:
        lines.insert(0, PARTIAL_NOTE)
    return "\n".join(lines)


_NO_ENCODER = "no encoder is available: keyword-only recall"
PARTIAL_NOTE = (
    "(recall is partial right now: matched by keywords only, so meaning-alike memories may be missing)"
)


class Retriever:
    """Recall over one store with one encoder (None = keyword only) and one configuration."""

    def __init__(self, store: MemoryPort, embedder: Embedder | None, config: MemoryConfig) -> None:
        self.store = store
        self.embedder = embedder
        self.config = config
        self._remembering: set[str] = set()  # agents known to have had a record

    async def has_memories(self, agent_id: str) -> bool:
        """Whether the agent has any record to recall. A new agent has none, and then
        recall would embed the query and search for nothing on every turn. Once records
        exist the answer is kept (culling rarely empties a store, and a stale yes only
        costs a search that finds nothing); a no is asked again each time, since
        consolidation or `persyn memory import` may add the first record at any moment."""
        if agent_id in self._remembering:
            return True
        if not await self.store.list_records(agent_id, limit=1):
            return False
        self._remembering.add(agent_id)
        return True

    async def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        channel: str,
        participants: Sequence[str],
        now: datetime,
        budget_tokens: int,
        limit: int | None = None,
        mode: Mode = "hybrid",
    ) -> RetrievalResult:
        config = self.config
        analysed = analyse_query(query, _aware(now))
        if not await self.has_memories(agent_id):
            return RetrievalResult(
                query=query,
                channel=channel,
                now=now,
                mode=mode,
                degraded=None if self.embedder is not None or mode == "keyword" else _NO_ENCODER,
                budget_tokens=budget_tokens,
                periods=analysed.periods,
            )
        channels = eligible_channels(channel, config.channel_groups)
        pool = config.candidates

        # Each search comes back with its own candidates (`Store.vector_recall` /
        # `keyword_recall`: on PostgreSQL read by the search's own statement), so one fetch
        # overlaps the other search instead of waiting for both (a record found both ways is
        # read twice; that costs less than the wait).
        async def keyword_search() -> tuple[dict[str, float], list[RecallCandidate]]:
            if mode == "vector" or not analysed.keyword_query:
                return {}, []
            found = await self.store.keyword_recall(agent_id, analysed.keyword_query, pool, channels)
            return dict(found.hits), found.candidates

        async def vector_search() -> tuple[dict[str, float], str | None, list[RecallCandidate]]:
            if mode == "keyword":
                return {}, None, []
            found, why = await self._vector_search(agent_id, self._embedding_text(analysed), pool, channels)
            cosines = {rid: 1.0 - distance for rid, distance in found.hits}
            return cosines, why, found.candidates

        async def period_search() -> list[RecallCandidate]:
            # "What did we talk about yesterday?" has no words a record shares: the period
            # itself is the cue, so records formed in it are candidates too (hybrid only:
            # the vector and keyword modes are the pure methods).
            if mode != "hybrid" or not analysed.periods:
                return []
            return await self._formed_in(agent_id, analysed.periods, pool)

        (cosines, degraded, by_vector), (bm25, by_keyword), in_period = await asyncio.gather(
            vector_search(), keyword_search(), period_search()
        )

        # Candidates, not records: only the few kept are built in full (`RecallCandidate`).
        unique: dict[str, RecallCandidate] = {}
        for record in (*in_period, *by_vector, *by_keyword):
            unique.setdefault(record.id, record)
        fetched = list(unique.values())
        eligible = [r for r in fetched if r.channel in channels]
        allowed = [
            r
            for r in eligible
            if may_surface(r, channel, participants, config.channel_groups, agent_id=agent_id)
        ]

        best_coverage = 0.0
        if bm25:
            by_id = {r.id: r for r in fetched}
            best_id = max(bm25, key=lambda rid: (bm25[rid], rid))
            best = by_id.get(best_id)
            if best is not None:
                best_coverage = _coverage(analysed.terms, best)
        keyword = keyword_components(bm25, best_coverage)

        scored: list[tuple[float, RecallCandidate, Components]] = []
        for record in allowed:
            parts = Components(
                similarity=similarity_component(
                    cosines.get(record.id), config.similarity_floor, config.similarity_ceiling
                ),
                keyword=keyword.get(record.id, 0.0),
                recency=recency_component(record.created_at, now, config.half_life_days),
                importance=importance_component(record.importance),
                participants=participant_component(record.participant_ids, participants),
                date=period_match(analysed.periods, _aware(record.created_at)) if analysed.periods else None,
            )
            scored.append((fused_score(parts, config.weights), record, parts))
        scored.sort(key=lambda item: (-item[0], -_aware(item[1].created_at).timestamp(), item[1].id))
        scored = [item for item in scored if item[0] >= config.min_score]

        cap = config.max_records if limit is None else max(0, limit)
        surfaced = len(scored)
        scored = spread_over_episodes(scored, lambda item: item[0], _episode, config.episode_penalty, cap)
        ranked = [
            self._annotate(
                score, candidate.record(), now, cosines.get(candidate.id), keyword.get(candidate.id)
            )
            for score, candidate, _ in scored
        ]
        packed = pack(ranked, lambda s: s.tokens, budget_tokens)
        return RetrievalResult(
            query=query,
            channel=channel,
            now=now,
            mode=mode,
            records=tuple(packed),
            components=tuple(parts for _, _, parts in scored[: len(packed)]),
            degraded=degraded,
            considered=len(eligible),
            withheld=len(eligible) - len(allowed),
            over_budget=surfaced - len(packed),
            budget_tokens=budget_tokens,
            periods=analysed.periods,
        )

    def _embedding_text(self, analysed: AnalysedQuery) -> str:
        """The question as the encoder reads it best: whole for one that reads syntax, its
        content words for one that averages token vectors."""
        if isinstance(self.embedder, SentenceReader) and self.embedder.reads_sentences:
            return analysed.sentence
        return analysed.embedding_text

    async def _vector_search(
        self, agent_id: str, text: str, pool: int, channels: Sequence[str]
    ) -> tuple[RecallHits, str | None]:
        """Nearest records to `text` with their candidates (one store call: PostgreSQL
        answers both in one statement), or none and the reason when the encoder cannot
        serve: an unavailable encoder degrades recall to keyword search, never fails the turn."""
        nothing = RecallHits([], [])
        if self.embedder is None:
            return nothing, _NO_ENCODER
        try:
            [vector] = await self.embedder.embed([text])
        except Exception as exc:  # SPEC §6: whatever the encoder does, the turn goes on
            log.warning("encoder %s unavailable, recalling by keyword only: %s", self.embedder.name, exc)
            return nothing, f"encoder {self.embedder.name!r} unavailable ({exc}): keyword-only recall"
        try:
            return await self.store.vector_recall(agent_id, vector, pool, channels), None
        except StoreError as exc:  # the vector index is an enrichment; full text still answers
            log.warning("vector search failed, recalling by keyword only: %s", exc)
            return nothing, f"vector search failed ({exc}): keyword-only recall"

    async def _formed_in(self, agent_id: str, periods: Sequence[Period], pool: int) -> list[RecallCandidate]:
        """Up to `pool` records formed in each of the (first three) periods, newest first.
        Paging starts at the smallest ULID of the period's end: record ids are ULIDs whose
        time part is when the record formed."""
        found: dict[str, MemoryRecord] = {}
        for period in periods[:3]:
            end = _aware(period.end).timestamp()
            if end <= 0:  # before 1970: no ULID can say it, and no record formed then
                continue
            before = str(ULID.from_timestamp(min(end, _MAX_ULID_SECONDS)))[:10] + "0" * 16
            for record in await self.store.list_records(agent_id, limit=pool, before_id=before):
                if _aware(record.created_at) >= _aware(period.start):
                    found.setdefault(record.id, record)
        return [RecallCandidate.of(record) for record in found.values()]

    def _annotate(
        self, score: float, record: MemoryRecord, now: datetime, cosine: float | None, keyword: float | None
    ) -> ScoredRecord:
        band = band_for(score, self.config.strong_threshold, self.config.moderate_threshold)
        line = memory_line(record, band, now)
        return ScoredRecord(
            record=record,
            score=score,
            band=band,
            tokens=estimate_tokens(line + "\n"),
            similarity=cosine,
            keyword=keyword,
        )


def _episode(item: tuple[float, RecallCandidate, Components]) -> tuple[str, date]:
    """What one sitting is, as far as a record tells: its compartment and its day."""
    return item[1].channel, _aware(item[1].created_at).date()


def _coverage(terms: Sequence[str], record: RecallCandidate) -> float:
    """The share of the query's content words (stemmed) that occur in the record."""
    if not terms:
        return 0.0
    present = set(content_terms(" ".join((record.summary, *record.tags))))
    return sum(1 for t in terms if t in present) / len(terms)
