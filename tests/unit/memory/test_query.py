"""Query processing for recall: content words and the dates a query names."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persyn.memory._query import analyse_query, content_words, period_match, query_periods

NOW = datetime(2023, 10, 20, 15, 0, tzinfo=UTC)  # a Friday


def _spans(text: str) -> list[tuple[date, date, str]]:
    return [(p.start.date(), p.end.date(), p.precision) for p in query_periods(text, NOW)]


def test_stop_words_and_memory_talk_are_dropped() -> None:
    assert content_words("Do you remember what Caroline's mentor said about the adoption?") == [
        "caroline",
        "mentor",
        "adoption",
    ]
    assert content_words("what did we do?") == []


def test_an_all_stop_word_query_still_embeds_something() -> None:
    analysed = analyse_query("what did we do?", NOW)
    assert analysed.keyword_query == ""
    assert analysed.embedding_text == "what did we do?"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did Melanie show on October 13, 2023?", [(date(2023, 10, 13), date(2023, 10, 14), "day")]),
        ("What did Gina find on 1 February, 2023?", [(date(2023, 2, 1), date(2023, 2, 2), "day")]),
        ("the 2024-03-05 meeting", [(date(2024, 3, 5), date(2024, 3, 6), "day")]),
        ("What happened in December 2022?", [(date(2022, 12, 1), date(2023, 1, 1), "month")]),
        ("Trips in 2022", [(date(2022, 1, 1), date(2023, 1, 1), "year")]),
        ("what did we talk about yesterday?", [(date(2023, 10, 19), date(2023, 10, 20), "day")]),
        ("anything from last week", [(date(2023, 10, 9), date(2023, 10, 16), "week")]),
        ("three days ago", [(date(2023, 10, 17), date(2023, 10, 18), "day")]),
        ("what did we plan on tuesday", [(date(2023, 10, 17), date(2023, 10, 18), "day")]),
        # A relative expression next to a day counts from that day.
        (
            "What did Maria do last weekend before April 10, 2023?",
            [(date(2023, 4, 10), date(2023, 4, 11), "day"), (date(2023, 4, 8), date(2023, 4, 10), "day")],
        ),
        ("I may go hiking", []),  # "may" the verb is not May the month
        ("nothing temporal here", []),
    ],
)
def test_periods(text: str, expected: list[tuple[date, date, str]]) -> None:
    assert _spans(text) == expected


def test_a_bare_month_matches_that_month_of_any_year() -> None:
    (june,) = query_periods("When did Melanie go camping in June?", NOW)
    assert june.month_any_year == 6
    assert period_match((june,), datetime(2021, 6, 15, tzinfo=UTC)) == 1.0
    assert period_match((june,), datetime(2023, 8, 15, tzinfo=UTC)) < 0.5


def test_relative_words_are_kept_out_of_the_search_text() -> None:
    analysed = analyse_query("what did Ann say about the hike yesterday?", NOW)
    assert analysed.keyword_query == "ann hike"
    assert analysed.periods


@given(st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2060, 1, 1)))
def test_period_match_is_one_inside_and_decays_outside(moment: datetime) -> None:
    (day,) = query_periods("on 4 March 2026", NOW)
    when = moment.replace(tzinfo=UTC)
    score = period_match((day,), when)
    assert 0.0 <= score <= 1.0
    if day.start <= when < day.end:
        assert score == 1.0
    else:
        assert score < 1.0


@given(st.text(max_size=200))
def test_any_text_is_analysed_without_error(text: str) -> None:
    analysed = analyse_query(text, NOW)
    assert analysed.embedding_text or not text.strip()
    for period in analysed.periods:
        assert period.start < period.end
