"""The words a keyword search over long-term memory looks for, and how much each column of a
record weighs, for every backend (SQLite's FTS5 and PostgreSQL's posting lists score alike)."""

from __future__ import annotations

import re

__all__ = ["KEYWORD_WEIGHTS", "STOP_WORDS", "fts_any_words"]

_MAX_QUERY_TERMS = 32

# bm25 column weights of memory_fts (summary, tags): a tag is a deliberate topic label.
KEYWORD_WEIGHTS = (1.0, 2.0)

# English function words: in a question ("what did she say about the lake?") they carry no
# topic, yet under OR semantics they would match nearly every record.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could couldn d did didn do does doesn
    doing don down during each else ever few for from further had hadn has hasn have haven
    having he her here hers herself him himself his how i if in into is isn it its itself just
    ll m me might more most must mustn my myself no nor not now o of off on once only or other
    ought our ours ourselves out over own re s same shall shan she should shouldn so some such
    t than that the their theirs them themselves then there these they this those through to
    too under until up upon us ve very was wasn we were weren what when where which while who
    whom whose why will with won would wouldn y you your yours yourself yourselves
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

_WORD = re.compile(r"[^\W_]+")


def fts_any_words(query: str) -> list[str] | None:
    """The words a keyword search for `query` looks for, in its order, or None if it has none:
    runs of letters and digits, case-folded and de-duplicated; stop-words and single letters
    dropped unless nothing else is left; at most 32."""
    words = list(dict.fromkeys(_WORD.findall(query.casefold())))
    if not words:
        return None
    content = [word for word in words if word not in STOP_WORDS and not (len(word) == 1 and word.isalpha())]
    return (content or words)[:_MAX_QUERY_TERMS]
