"""Raw dialog in recall (SPEC §4.2 "check the raw record"): what was said, found by its words
and ranked with the memories, so the agent can find a detail its memories dropped.

For one query `DialogRecall.rank`
1. asks the dialog store for messages matching ANY of the query's content words on the
   channels of the compartment (`DialogHistoryPort.rank_messages`: people's and the agent's
   lines of dialog conversations, best keyword score first);
2. drops every message the sensitivity policy withholds from the people present now, by the
   same rule as a memory (`access.may_surface`): its provenance is its conversation's
   channel and participants, at `confidential` at least — as the `search_dialog` tool
   treats verbatim dialog: only on the exact channel it was said on (a channel group never
   widens it), only when everyone present now took part — or higher when the channel's
   default (`[memory] default_sensitivity`) or the conversation's memory (what consolidation
   judged) says so. The channel filter is in the search itself. A purged message is gone
   from the store, so it is never found;
3. scores each with the memories' scorer (`retrieval.fused_score`): keyword match relative
   to the best, the message/query cosine (the hits embedded in one batch), recency, the
   participants' share, the date match; importance is the middle of the scale.

`merge_recall` then merges the two rankings by score, spreads the top over episodes as
memory recall does (a channel's day) and packs it into the budget. On LoCoMo (dev split,
`bench/locomo.py`) merging the raw dialog with the observations lifted recall_all@5 from
0.776 to ~0.80 and with session summaries from 0.726 to 0.80 (see the script's docstring).
A message enters the prompt marked as what was said, with who and when (`said_line`), not as
the agent's memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from persyn.core.config import MemoryConfig
from persyn.core.errors import StoreError
from persyn.core.ids import derived_id
from persyn.core.records import RelevanceBand, ScoredRecord, Sensitivity, channel_key
from persyn.memory._query import analyse_query, content_terms, period_match
from persyn.memory.access import may_surface
from persyn.memory.consolidate import default_sensitivity
from persyn.memory.embedder import Embedder, SentenceReader
from persyn.memory.retrieval import (
    PARTIAL_NOTE,
    Components,
    Mode,
    RetrievalResult,
    Retriever,
    band_for,
    estimate_tokens,
    friendly_when,
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
from persyn.store.ports.dialog import Conversation, DialogHistoryPort, DialogHit, Message
from persyn.store.ports.memory import MemoryPort

__all__ = [
    "DIALOG_FLOOR",
    "DialogRecall",
    "Recalled",
    "Recollection",
    "SaidLine",
    "format_recollection",
    "merge_recall",
    "recollect",
    "said_line",
]

log = logging.getLogger(__name__)

# Verbatim dialog has no sensitivity of its own: as a confidence of its conversation, like
# `tools.builtin.provider`'s `dialog_sensitivity` for `search_dialog`.
DIALOG_FLOOR = Sensitivity.CONFIDENTIAL
_IMPORTANCE = 5  # a message has no rating: the middle of the 1-10 scale, as an import's default
_MAX_LINE_CHARS = 600  # a long message is cut in the prompt (the dialog keeps it whole)


@dataclass(frozen=True)
class SaidLine:
    """A message recall found, with where it may surface (`access.Provenanced`)."""

    message: Message
    channel: str  # its conversation's channel_key
    participant_ids: tuple[str, ...]
    sensitivity: Sensitivity
    score: float
    band: RelevanceBand
    tokens: int
    components: Components


Recalled = ScoredRecord | SaidLine


@dataclass(frozen=True)
class Recollection:
    """Memories and what was said, merged into one ranking (best first, packed)."""

    memories: RetrievalResult
    ranked: tuple[Recalled, ...]

    @property
    def said(self) -> tuple[SaidLine, ...]:
        return tuple(item for item in self.ranked if isinstance(item, SaidLine))

    @property
    def records(self) -> tuple[ScoredRecord, ...]:
        return tuple(item for item in self.ranked if isinstance(item, ScoredRecord))


def said_line(line: SaidLine, now: datetime) -> str:
    """`[said] (Wed 4 Mar 2026, 3 days ago; on irc:#c) Ann: "…"` — verbatim, who and when."""
    text = " ".join(line.message.text.split())
    if len(text) > _MAX_LINE_CHARS:
        text = text[: _MAX_LINE_CHARS - 1] + "…"
    return f'[said] ({friendly_when(line.message.created_at, now)}; on {line.channel}) {line.message.speaker_name}: "{text}"'


def format_recollection(recollection: Recollection) -> str:
    """The ranking for the prompt, one line each (`memory_line`, `said_line`); a degraded
    recall says so first, as `format_memories` does."""
    now = recollection.memories.now
    lines = [
        said_line(item, now) if isinstance(item, SaidLine) else memory_line(item.record, item.band, now)
        for item in recollection.ranked
    ]
    if recollection.memories.degraded and lines:
        lines.insert(0, PARTIAL_NOTE)
    return "\n".join(lines)


def merge_recall(
    memories: RetrievalResult,
    said: Sequence[SaidLine],
    *,
    penalty: float,
    limit: int,
    budget_tokens: int,
) -> Recollection:
    """The memories and the messages as one ranking: by score (a memory first on a tie),
    spread over episodes (a channel's day) with `penalty`, the first `limit`, packed into
    `budget_tokens`."""
    merged: list[Recalled] = [*memories.records, *said]
    merged.sort(key=lambda item: -item.score)  # stable: memories first on ties
    top = spread_over_episodes(merged, lambda item: item.score, _episode, penalty, limit)
    return Recollection(memories, tuple(pack(top, lambda item: item.tokens, budget_tokens)))


async def recollect(
    retriever: Retriever,
    dialog: DialogRecall | None,
    agent_id: str,
    query: str,
    *,
    channel: str,
    participants: Sequence[str],
    now: datetime,
    budget_tokens: int,
    limit: int | None = None,
    mode: Mode = "hybrid",
    current_conversation: str | None = None,
) -> Recollection:
    """What comes to mind for `query`: the memories (`Retriever.retrieve`) and, with `dialog`
    (`[memory] dialog_recall`), the raw dialog (`DialogRecall.rank`), searched side by side
    and merged (`merge_recall`). The one recall path of a turn, `persyn memory recall` and
    `bench/locomo.py`. A failing dialog search costs its lines, never the recall; vector-only
    recall (a measurement) leaves the dialog out: it has no vectors."""
    config = retriever.config
    cap = config.max_records if limit is None else max(0, limit)

    async def said() -> list[SaidLine]:
        if dialog is None or mode == "vector":
            return []
        try:
            return await dialog.rank(
                agent_id,
                query,
                channel=channel,
                participants=participants,
                now=now,
                current_conversation=current_conversation,
            )
        except StoreError as exc:
            log.warning("raw-dialog recall failed, recalling memories only: %s", exc)
            return []

    memories, lines = await asyncio.gather(
        retriever.retrieve(
            agent_id,
            query,
            channel=channel,
            participants=participants,
            now=now,
            budget_tokens=budget_tokens,
            limit=cap,
            mode=mode,
        ),
        said(),
    )
    if not lines:
        return Recollection(memories, tuple(memories.records))
    return merge_recall(
        memories, lines, penalty=config.episode_penalty, limit=cap, budget_tokens=budget_tokens
    )


def _episode(item: Recalled) -> tuple[str, date]:
    if isinstance(item, SaidLine):
        return item.channel, _aware(item.message.created_at).date()
    return item.record.channel, _aware(item.record.created_at).date()


class DialogRecall:
    """Raw dialog ranked for recall, over one store, one encoder (None: keyword only) and one
    configuration."""

    def __init__(
        self, history: DialogHistoryPort, records: MemoryPort, embedder: Embedder | None, config: MemoryConfig
    ) -> None:
        self.history = history
        self.records = records
        self.embedder = embedder
        self.config = config

    async def rank(
        self,
        agent_id: str,
        query: str,
        *,
        channel: str,
        participants: Sequence[str],
        now: datetime,
        current_conversation: str | None = None,
    ) -> list[SaidLine]:
        """The messages that may surface here, best first (at most `dialog_candidates`); none
        of `current_conversation`, whose dialog the prompt already holds."""
        config = self.config
        analysed = analyse_query(query, _aware(now))
        if not analysed.keyword_query:
            return []
        # At `DIALOG_FLOOR` nothing of another channel may surface: search this one only.
        hits = await self.history.rank_messages(
            agent_id, analysed.keyword_query, channels=[channel], limit=config.dialog_candidates
        )
        hits = [hit for hit in hits if hit.message.conversation_id != current_conversation]
        if not hits:
            return []
        levels = await self._sensitivities(agent_id, [hit.conversation for hit in hits])
        allowed: list[tuple[DialogHit, SaidLine]] = []
        for hit in hits:
            conversation = hit.conversation
            line = SaidLine(
                message=hit.message,
                channel=channel_key(conversation.service, conversation.channel),
                participant_ids=conversation.participant_ids,
                sensitivity=levels[conversation.id],
                score=0.0,
                band=RelevanceBand.WEAK,
                tokens=0,
                components=Components(),
            )
            if may_surface(line, channel, participants, config.channel_groups, agent_id=agent_id):
                allowed.append((hit, line))
        if not allowed:
            return []
        best = max(allowed, key=lambda pair: pair[0].score)[0]
        keyword = keyword_components(
            {hit.message.id: hit.score for hit, _ in allowed}, _coverage(analysed.terms, _said(best.message))
        )
        cosines = await self._cosines(
            analysed.sentence, analysed.embedding_text, [_said(h.message) for h, _ in allowed]
        )
        ranked: list[SaidLine] = []
        for index, (hit, line) in enumerate(allowed):
            created = _aware(hit.message.created_at)
            parts = Components(
                similarity=similarity_component(
                    cosines[index] if cosines else None, config.similarity_floor, config.similarity_ceiling
                ),
                keyword=keyword.get(hit.message.id, 0.0),
                recency=recency_component(created, now, config.half_life_days),
                importance=importance_component(_IMPORTANCE),
                participants=participant_component(line.participant_ids, participants),
                date=period_match(analysed.periods, created) if analysed.periods else None,
            )
            score = fused_score(parts, config.weights)
            if score < config.min_score:
                continue
            scored = SaidLine(
                message=line.message,
                channel=line.channel,
                participant_ids=line.participant_ids,
                sensitivity=line.sensitivity,
                score=score,
                band=band_for(score, config.strong_threshold, config.moderate_threshold),
                tokens=0,
                components=parts,
            )
            ranked.append(_with_tokens(scored, now))
        ranked.sort(key=lambda s: (-s.score, -_aware(s.message.created_at).timestamp(), s.message.id))
        return ranked

    async def _sensitivities(self, agent_id: str, found: Sequence[Conversation]) -> dict[str, Sensitivity]:
        """Each conversation's sensitivity: `DIALOG_FLOOR`, raised to its channel's default or
        its memory's if either is higher (the memory as `cognition.context.PeopleSource`
        reads it)."""
        conversations = {c.id: c for c in found}
        memory_ids = {derived_id(c.started_at, c.id, "memory"): c.id for c in conversations.values()}
        judged = {
            memory_ids[r.id]: r.sensitivity
            for r in await self.records.records_by_ids(agent_id, list(memory_ids))
        }
        levels: dict[str, Sensitivity] = {}
        for conversation_id, conversation in conversations.items():
            level = max(DIALOG_FLOOR, default_sensitivity(self.config, conversation.service), key=_rank)
            memory = judged.get(conversation_id)
            if memory is not None and memory.rank > level.rank:
                level = memory
            levels[conversation_id] = level
        return levels

    async def _cosines(self, sentence: str, content: str, texts: Sequence[str]) -> list[float] | None:
        """The query's cosine with each text, or None when the encoder cannot serve (the
        messages then score by keywords alone, as memories do with the encoder down)."""
        if self.embedder is None:
            return None
        reads = isinstance(self.embedder, SentenceReader) and self.embedder.reads_sentences
        try:
            vectors = await self.embedder.embed([sentence if reads else content, *texts])
        except Exception as exc:  # SPEC §6: the encoder failing costs similarity, never the turn
            log.warning("encoder unavailable for raw-dialog recall: %s", exc)
            return None
        query, *rest = vectors
        return [_cosine(query, vector) for vector in rest]


def _rank(level: Sensitivity) -> int:
    return level.rank


def _said(message: Message) -> str:
    """What a message says, as its line reads: who said it, then what ("Ann: ..."), so a
    question that names the speaker matches it as it would a memory naming them."""
    return f"{message.speaker_name}: {message.text}"


def _with_tokens(line: SaidLine, now: datetime) -> SaidLine:
    return SaidLine(
        message=line.message,
        channel=line.channel,
        participant_ids=line.participant_ids,
        sensitivity=line.sensitivity,
        score=line.score,
        band=line.band,
        tokens=estimate_tokens(said_line(line, now) + "\n"),
        components=line.components,
    )


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5
    return dot / norm if norm > 0 else 0.0


def _coverage(terms: Sequence[str], text: str) -> float:
    """The share of the query's content words (stemmed) the text says."""
    if not terms:
        return 0.0
    present = set(content_terms(text))
    return sum(1 for t in terms if t in present) / len(terms)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
