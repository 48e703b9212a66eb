"""What the searches of every backend share: the words a keyword search over long-term memory
looks for and how much each column of a record weighs (SQLite's FTS5 and PostgreSQL's posting
lists score alike), and vectors as every backend stores them: scaled to unit length, packed as
float32, so cosine distance is unchanged and float32 arithmetic inside the index can neither
overflow nor underflow."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence

from persyn.core.errors import InputError

__all__ = ["KEYWORD_WEIGHTS", "MAX_DIMS", "STOP_WORDS", "check_dims", "fts_any_words", "unit_vector"]

# keyword search -------------------------------------------------------------------------------
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


# vectors ----------------------------------------------------------------------------------------
MAX_DIMS = 8192  # sqlite-vec's limit for float vectors: a vector one backend accepts, all do


def check_dims(dims: int) -> int:
    """`dims`, if it is a vector size every backend accepts; InputError if not."""
    if not isinstance(dims, int) or not 1 <= dims <= MAX_DIMS:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InputError(f"vector dimensions {dims!r} out of range 1..{MAX_DIMS}")
    return dims


def unit_vector(vector: Sequence[float], what: str = "vector") -> bytes | None:
    """`vector` scaled to unit length as float32 bytes; None if it is all zeros.

    Raises InputError for an empty, oversized or non-finite vector."""
    values = [float(x) for x in vector]
    check_dims(len(values))
    if not all(math.isfinite(x) for x in values):
        raise InputError(f"{what} has a non-finite component (NaN or infinity)")
    norm = math.hypot(*values)
    if not math.isfinite(norm):  # finite components whose length overflows: rescale first
        largest = max(abs(x) for x in values)
        values = [x / largest for x in values]
        norm = math.hypot(*values)
    if norm == 0.0:
        return None
    return struct.pack(f"<{len(values)}f", *(x / norm for x in values))
