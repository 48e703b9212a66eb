"""Merging memories with raw dialog (`memory/dialog_recall.py`): one ranking by score, spread
over episodes, packed into the budget; a message's line says it is what was said."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, RelevanceBand, ScoredRecord, Sensitivity
from persyn.memory.dialog_recall import SaidLine, format_recollection, merge_recall, said_line
from persyn.memory.retrieval import Components, RetrievalResult
from persyn.store.ports.dialog import Message, Role

NOW = datetime(2026, 3, 7, 12, tzinfo=UTC)
AGENT = new_id(NOW)
CONVERSATION = new_id(NOW)


def _memory(score: float, day: int, channel: str = "irc:#c", tokens: int = 10) -> ScoredRecord:
    at = NOW - timedelta(days=day)
    record = MemoryRecord(
        id=new_id(at), agent_id=AGENT, created_at=at, channel=channel, participant_ids=(), summary=f"m{score}"
    )
    return ScoredRecord(record=record, score=score, band=RelevanceBand.MODERATE, tokens=tokens)


def _said(score: float, day: int, text: str = "we went to the lake", tokens: int = 10) -> SaidLine:
    at = NOW - timedelta(days=day)
    message = Message(
        id=new_id(at),
        agent_id=AGENT,
        conversation_id=CONVERSATION,
        role=Role.USER,
        person_id=None,
        speaker_name="Ann",
        text=text,
        created_at=at,
        event_id=None,
    )
    return SaidLine(
        message=message,
        channel="irc:#c",
        participant_ids=(),
        sensitivity=Sensitivity.CONFIDENTIAL,
        score=score,
        band=RelevanceBand.MODERATE,
        tokens=tokens,
        components=Components(),
    )


def _memories(*records: ScoredRecord) -> RetrievalResult:
    return RetrievalResult(query="q", channel="irc:#c", now=NOW, mode="hybrid", records=records)


def test_merged_by_score_a_memory_first_on_a_tie() -> None:
    first, tied = _memory(0.9, 1), _memory(0.5, 2)
    above, tie, below = _said(0.7, 3), _said(0.5, 4), _said(0.2, 5)
    found = merge_recall(
        _memories(first, tied), [above, tie, below], penalty=1.0, limit=10, budget_tokens=1000
    )
    assert found.ranked == (first, above, tied, tie, below)
    assert found.records == (first, tied) and found.said == (above, tie, below)


def test_spread_over_episodes_limited_and_packed() -> None:
    same_day = [_said(0.8, 1), _said(0.79, 1), _said(0.78, 1)]
    other_day = _memory(0.7, 2)
    found = merge_recall(_memories(other_day), same_day, penalty=0.8, limit=3, budget_tokens=1000)
    assert found.ranked == (same_day[0], other_day, same_day[1])  # 0.79 x 0.8 < 0.7
    packed = merge_recall(_memories(other_day), same_day, penalty=1.0, limit=4, budget_tokens=25)
    assert packed.ranked == tuple(same_day[:2])  # a third line would pass the budget


def test_a_said_line_names_who_when_and_where_and_is_cut_when_long() -> None:
    line = said_line(_said(0.5, 3), NOW)
    assert line == '[said] (Wed 4 Mar 2026, 3 days ago; on irc:#c) Ann: "we went to the lake"'
    long = said_line(_said(0.5, 0, text="word " * 500), NOW)
    assert len(long) < 700 and long.endswith('…"')
    text = format_recollection(
        merge_recall(_memories(_memory(0.9, 0)), [_said(0.4, 3)], penalty=1, limit=5, budget_tokens=99)
    )
    assert text.splitlines()[1].startswith("[said] (")
