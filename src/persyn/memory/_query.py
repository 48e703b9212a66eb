"""Query processing for recall: content words and the dates a query names.

- Stop words go. Keyword search ORs the query's words, so "what did we say about it" would
  otherwise match nearly every record, cost a full scan at scale and dilute BM25; and
  WordLlama averages token vectors, so function words pull every query toward the same
  centre. On LoCoMo removing them gained recall_all@5 on both granularities (bench/locomo.py).
- Dates become periods. "What did we decide on 4 March?", "last week", "in June 2023" name
  *when*, and no embedding or BM25 can match a record's time; a date-match component scores
  records by how close they formed to the period.

English only, deliberately small and predictable: no model, no network.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

__all__ = [
    "MONTH_NAMES",
    "STOP_WORDS",
    "WEEKDAY_NAMES",
    "AnalysedQuery",
    "Period",
    "analyse_query",
    "content_terms",
    "content_words",
    "period_match",
    "query_periods",
    "stem",
    "words",
]

# Function words and the question and memory-talk words ("remember", "talked") that say how
# something is asked, not what about. Contraction fragments are here because the tokenizer
# (like FTS5's) splits at apostrophes.
STOP_WORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
    her hers herself it its itself they them their theirs themselves what which who whom whose this
    that these those am is are was were be been being have has had having do does did doing a an the
    and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very can will just should now would could might must shall us let
    also yet ago s t d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn
    mustn needn shan shouldn wasn weren won wouldn don
    remember remembered recall recalled remind reminded tell told talk talked talking mention
    mentioned discuss discussed say said
    """.split()  # noqa: SIM905 - a word list reads better as text
)

_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """Lower-case word tokens without diacritics; apostrophes and punctuation split — as
    the store's FTS5 tokenizer (unicode61, remove_diacritics) reads text."""
    folded = unicodedata.normalize("NFKD", text.lower())
    return _WORD.findall("".join(ch for ch in folded if not unicodedata.combining(ch)))


def content_words(text: str) -> list[str]:
    """The words that say what a text is about: no stop words, first occurrence only."""
    return list(dict.fromkeys(w for w in words(text) if w not in STOP_WORDS))


_SUFFIXES = ("ingly", "edly", "ness", "ment", "ing", "ies", "ied", "est", "ed", "es", "er", "ly", "s")


def stem(word: str) -> str:
    """A crude suffix stripper: enough for "hiking"/"hiked"/"hikes" to meet. Not Porter;
    the store's full-text index does its own stemming."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_terms(text: str) -> list[str]:
    """Stemmed content words, first occurrence only."""
    return list(dict.fromkeys(stem(w) for w in content_words(text)))


# dates --------------------------------------------------------------------------------------------
Precision = Literal["day", "week", "month", "year"]

# How far outside a period a record still half-matches, by the period's precision: a day
# named in a question is often the day an event was *talked about*, a few days off the event.
_HALF_MATCH_DAYS: dict[str, float] = {"day": 7.0, "week": 7.0, "month": 15.0, "year": 60.0}


@dataclass(frozen=True)
class Period:
    """A span of time a query names: [start, end). `month_any_year` is set for a bare month
    ("in June"): that month of any year matches fully."""

    start: datetime
    end: datetime
    precision: Precision
    month_any_year: int | None = None


def period_match(periods: tuple[Period, ...], when: datetime) -> float:
    """1 if `when` falls in one of the periods, else decaying with the distance to the
    nearest (halving every `_HALF_MATCH_DAYS[precision]`); in [0, 1]."""
    best = 0.0
    for period in periods:
        if period.month_any_year is not None and when.month == period.month_any_year:
            return 1.0
        if period.start <= when < period.end:
            return 1.0
        gap = min(abs((when - period.start).total_seconds()), abs((when - period.end).total_seconds()))
        best = max(best, 0.5 ** (gap / 86_400 / _HALF_MATCH_DAYS[period.precision]))
    return best


# English names, spelled out: `calendar` follows the process locale.
MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = {
    **{name.lower(): number for number, name in enumerate(MONTH_NAMES, start=1)},
    **{name[:3].lower(): number for number, name in enumerate(MONTH_NAMES, start=1)},
    "sept": 9,
}
_MON = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_WEEKDAYS = {name.lower(): number for number, name in enumerate(WEEKDAY_NAMES)}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("iso", r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"),
        ("dmy", rf"\b{_DAY}\s+(?:of\s+)?{_MON},?\s+{_YEAR}\b"),
        ("mdy", rf"\b{_MON}\s+{_DAY},?\s+{_YEAR}\b"),
        ("my", rf"\b{_MON},?\s+{_YEAR}\b"),
        ("dm", rf"\b{_DAY}\s+(?:of\s+)?{_MON}\b"),
        ("md", rf"\b{_MON}\s+{_DAY}\b(?!:)"),
        # A bare month needs a preposition: "may", "march" and "august" are also words.
        (
            "m",
            rf"\b(?:in|during|since|by|of|until|till|before|after|last|early|late|mid|this|next|through|about|around|from)[\s-]+{_MON}\b",
        ),
        ("y", rf"\b{_YEAR}\b"),
        (
            "ago",
            r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s+(day|week|month|year)s?\s+ago\b",
        ),
        (
            "rel",
            r"\b(today|tonight|this morning|this afternoon|this evening|yesterday|last night|the day before yesterday)\b",
        ),
        ("last", r"\b(last|this|past)\s+(week|weekend|month|year)\b"),
        (
            "weekday",
            r"\b(?:on|last|this|past)\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
        ),
    )
)


_RELATIVE = frozenset({"ago", "rel", "last", "weekday"})


def query_periods(text: str, now: datetime) -> tuple[Period, ...]:
    """The periods `text` names. Each stretch of text is read once, by the most specific
    pattern that matches it. Relative expressions ("yesterday", "last weekend") count from
    `now` — or, when the text also names a day ("the weekend before 10 April 2023"), from
    that day, since they then describe it."""
    return _scan(text, now)[0]


def _scan(text: str, now: datetime) -> tuple[tuple[Period, ...], list[tuple[int, int]]]:
    """The periods, and the spans of the relative expressions (which say nothing a
    record's words could match, so they are kept out of the search text)."""
    lowered = text.lower()
    taken: list[tuple[int, int]] = []
    absolute: list[Period] = []
    relative: list[tuple[str, tuple[str, ...]]] = []
    relative_spans: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(lowered):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            taken.append(match.span())
            if kind in _RELATIVE:
                relative.append((kind, match.groups()))
                relative_spans.append(match.span())
                continue
            period = _period(kind, match.groups(), now)
            if period is not None:
                absolute.append(period)
    anchor = next((p.end for p in absolute if p.precision == "day"), None)
    if absolute and anchor is None:
        return tuple(absolute), relative_spans  # "last month in 2022": the year says it all
    found = [_period(kind, groups, anchor or now) for kind, groups in relative]
    return (*absolute, *(p for p in found if p is not None)), relative_spans


def _period(kind: str, groups: tuple[str, ...], now: datetime) -> Period | None:
    today = datetime(now.year, now.month, now.day, tzinfo=now.tzinfo or UTC)
    try:
        if kind == "iso":
            return _day(datetime(int(groups[0]), int(groups[1]), int(groups[2]), tzinfo=today.tzinfo))
        if kind == "dmy":
            return _day(datetime(int(groups[2]), _MONTHS[groups[1]], int(groups[0]), tzinfo=today.tzinfo))
        if kind == "mdy":
            return _day(datetime(int(groups[2]), _MONTHS[groups[0]], int(groups[1]), tzinfo=today.tzinfo))
        if kind == "my":
            return _month(int(groups[1]), _MONTHS[groups[0]], today)
        if kind in ("dm", "md"):
            day, month = (
                (int(groups[0]), _MONTHS[groups[1]]) if kind == "dm" else (int(groups[1]), _MONTHS[groups[0]])
            )
            # No year: the most recent such day (this year's, unless that is still ahead).
            moment = datetime(today.year, month, day, tzinfo=today.tzinfo)
            if moment > today:
                moment = datetime(today.year - 1, month, day, tzinfo=today.tzinfo)
            return _day(moment)
        if kind == "m":
            month = _MONTHS[groups[0]]
            year = today.year if month <= today.month else today.year - 1
            return Period(*_month_span(year, month, today), "month", month_any_year=month)
        if kind == "y":
            start = datetime(int(groups[0]), 1, 1, tzinfo=today.tzinfo)
            return Period(start, start.replace(year=start.year + 1), "year")
        if kind == "ago":
            return _ago(_NUMBERS.get(groups[0]) or int(groups[0]), groups[1], today)
        if kind == "rel":
            back = {"yesterday": 1, "last night": 1, "the day before yesterday": 2}.get(groups[0], 0)
            return _day(today - timedelta(days=back))
        if kind == "last":
            return _recent(groups[0], groups[1], today)
        if kind == "weekday":
            back = (today.weekday() - _WEEKDAYS[groups[0]]) % 7 or 7
            return _day(today - timedelta(days=back))
    except (ValueError, OverflowError):  # "31 February", year 0…
        return None
    return None


def _day(start: datetime) -> Period:
    return Period(start, start + timedelta(days=1), "day")


def _month_span(year: int, month: int, today: datetime) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=today.tzinfo)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=today.tzinfo)
    return start, end


def _month(year: int, month: int, today: datetime) -> Period:
    return Period(*_month_span(year, month, today), "month")


def _ago(count: int, unit: str, today: datetime) -> Period:
    if unit == "day":
        return _day(today - timedelta(days=count))
    if unit == "week":
        start = today - timedelta(days=7 * count + today.weekday())
        return Period(start, start + timedelta(days=7), "week")
    if unit == "month":
        index = today.year * 12 + today.month - 1 - count
        return _month(index // 12, index % 12 + 1, today)
    start = datetime(today.year - count, 1, 1, tzinfo=today.tzinfo)
    return Period(start, start.replace(year=start.year + 1), "year")


def _recent(which: str, unit: str, today: datetime) -> Period:
    back = 0 if which == "this" else 1
    if unit == "weekend":
        saturday = today - timedelta(days=(today.weekday() - 5) % 7)
        if which != "this" and saturday + timedelta(days=2) > today:
            saturday -= timedelta(days=7)
        return Period(saturday, saturday + timedelta(days=2), "day")
    return _ago(back, unit, today)


@dataclass(frozen=True)
class AnalysedQuery:
    text: str
    keyword_query: str  # content words for full-text search ("" = skip keyword search)
    embedding_text: str  # what is embedded: the content words, or the text if it has none
    sentence: str  # the text without its relative date expressions, for an encoder that reads syntax
    terms: tuple[str, ...]  # stemmed content words, for keyword coverage
    periods: tuple[Period, ...]


def analyse_query(text: str, now: datetime) -> AnalysedQuery:
    periods, relative_spans = _scan(text, now)
    searchable = text.lower()
    for start, end in relative_spans:
        searchable = searchable[:start] + " " * (end - start) + searchable[end:]
    kept = content_words(searchable)
    return AnalysedQuery(
        text=text,
        keyword_query=" ".join(kept),
        embedding_text=" ".join(kept) or text.strip() or text,
        sentence=" ".join(searchable.split()) or text.strip() or text,
        terms=tuple(dict.fromkeys(stem(w) for w in kept)),
        periods=periods,
    )
