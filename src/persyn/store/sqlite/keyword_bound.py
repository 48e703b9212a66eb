"""Keyword search on SQLite without ranking every match of a common word (ARCHITECTURE §7.1).

FTS5 ranks an OR query by computing bm25 for every row that matches any of its words. A word
found in a quarter or more of the records (a person's name in their own memories, a word the
agent uses every day) makes that hundreds of thousands of rows at a million records: 200-350
ms for one query, where the same query without that word takes ~10. Such a word also weighs
almost nothing in the score (bm25's idf of a word in half the records is ~0.1; of a rare word,
7-10), so it can only decide the order among records that the rare words already rank.

`keyword_by_bound` uses that, and gives exactly the answer of the plain plans:

1. The query's words are split into *common* ones C (one token, in at least a quarter of the
   index's rows: FTS5's row count from its averages record, each word's from `memory_fts_vocab`)
   and the rest E. Each word's contribution to bm25 is below (k1 + 1) x idf, so a record's score
   from C is below UB(C), the sum of those bounds. The plan is only tried when the E words match
   at most half as many rows as the C words (else ranking them costs about as much as all).
2. FTS5 ranks the E words alone (bm25 over their matches only), M best first, each looked up
   in `memory_records` for its compartment, its creation time and its text. M grows (x4, or by
   the compartment's share of what was fetched) up to 64 x k.
3. With θ the k-th best E score in the compartment: a record matching no E word scores below
   UB(C) < θ, and one whose E score is below θ - UB(C) scores below θ; neither can be among the
   k best, nor tie with them. The rest (the *band*) are scored in full here, the way FTS5's
   bm25 scores them: each band record's summary and tags are tokenized by an FTS5 table with
   the same tokenizer (in memory), and the formula of `fts5_aux.c` is applied phrase by phrase
   in query order, with the row count and token total from the index's averages record.
4. Checks. Once per process, FTS5's bm25 and the formula here must agree bit for bit on a
   scratch table of 300 rows (`QueryTokenizer.calibrated`): a SQLite built with fused
   multiply-adds (clang; gcc on arm64) rounds otherwise, and the plan is then off. For every
   band record, the E score computed here must equal FTS5's, or the plan gives up (an index
   out of step with its records). Anything that fails inside the plan gives up too: it is a
   shortcut, and the plain plans answer.

The plan gives up (None) whenever it cannot prove its answer (no common word, no other word,
fewer than k E matches in the compartment, θ not above UB(C), a band larger than 64 x k).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from persyn.store.sqlite.engine import sqlite_dbapi

__all__ = ["FTS_TOKENIZER", "QueryTokenizer", "keyword_by_bound"]

log = logging.getLogger(__name__)

# The tokenizer of memory_fts (migration 3); the in-memory tokenizer must use the same.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
_K1 = 1.2  # FTS5's bm25 constants (fts5_aux.c)
_B = 0.75
_COMMON_SHARE = 0.25  # a word in this share of the rows or more is "common"
_FIRST_FETCH = 4  # x k E matches fetched at first, then x4 once
_MOST_FETCH = 64


class QueryTokenizer:
    """Tokenizes text as memory_fts does: an in-memory FTS5 table with the same tokenizer,
    read back through an `fts5vocab` instance table. One per process, shared by the reader
    threads behind a lock (it is used for a few hundred short texts per query)."""

    _shared: QueryTokenizer | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        dbapi = sqlite_dbapi()
        self._connection: Any = dbapi.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._connection.execute(
            f"CREATE VIRTUAL TABLE tok USING fts5(summary, tags, content='', tokenize='{FTS_TOKENIZER}')"
        )
        self._connection.execute("CREATE VIRTUAL TABLE tok_instances USING fts5vocab(tok, instance)")
        self._calibrated: dict[tuple[float, ...], bool] = {}

    @classmethod
    def shared(cls) -> QueryTokenizer:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = QueryTokenizer()
            return cls._shared

    @classmethod
    def _forget(cls) -> None:
        """In a forked child: a lock another thread held at the fork would never be released."""
        cls._shared = None
        cls._shared_lock = threading.Lock()

    def calibrated(self, weights: Sequence[float]) -> bool:
        """Whether this SQLite's bm25 with these column weights equals `_bm25` bit for bit,
        tried once per process on a scratch FTS5 table of 300 varied rows and OR queries mixing
        common and rare words. A build that fuses multiply-adds (clang, gcc on arm64) rounds
        otherwise, and the plan is then off: the self-check of each answer compares only the
        rare words' part of a score."""
        key = tuple(weights)
        with self._lock:
            known = self._calibrated.get(key)
        if known is None:
            known = self._calibrate(key)
            with self._lock:
                self._calibrated[key] = known
        return known

    def _calibrate(self, weights: tuple[float, ...]) -> bool:
        if len(weights) != 2 or not all(weight > 0 for weight in weights):
            return False  # the bound needs positive weights; the index has two columns
        rng = random.Random(0)
        words = [f"w{n}" for n in range(12)]
        texts = [
            (
                " ".join(
                    rng.choices(words[:3], k=rng.randint(0, 4)) + rng.choices(words, k=rng.randint(0, 30))
                ),
                " ".join(rng.choices(words, k=rng.randint(0, 3))),
            )
            for _ in range(300)
        ]
        columns = self.tokens(texts)
        total = sum(len(summary) + len(tags) for summary, tags in columns)
        weights_sql = ", ".join(str(weight) for weight in weights)
        with self._lock:
            cursor = self._connection.cursor()
            cursor.execute(
                f"CREATE VIRTUAL TABLE calibration USING fts5(summary, tags, tokenize='{FTS_TOKENIZER}')"
            )
            try:
                cursor.executemany(
                    "INSERT INTO calibration(rowid, summary, tags) VALUES (?, ?, ?)",
                    [(index + 1, summary, tags) for index, (summary, tags) in enumerate(texts)],
                )
                for query in (words[:1] + words[5:7], words[:3], [words[1], *words[8:]], words[2:6]):
                    hits = [
                        sum(word in summary or word in tags for summary, tags in columns) for word in query
                    ]
                    idfs = [_idf(len(texts), count) for count in hits]
                    match = " OR ".join(f'"{word}"' for word in query)
                    for rowid, score in cursor.execute(
                        f"SELECT rowid, bm25(calibration, {weights_sql}) FROM calibration "
                        "WHERE calibration MATCH ?",
                        (match,),
                    ).fetchall():
                        if _bm25(idfs, query, columns[rowid - 1], weights, total / len(texts)) != -score:
                            log.info("this SQLite's bm25 rounds otherwise: no common-word bound")
                            return False
            finally:
                cursor.execute("DROP TABLE calibration")
        return True

    def tokens(self, texts: Sequence[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
        """Each (summary, tags) as its two columns' tokens (in no particular order)."""
        found: list[tuple[list[str], list[str]]] = [([], []) for _ in texts]
        with self._lock:
            cursor = self._connection.cursor()
            try:
                cursor.execute("BEGIN")
                cursor.executemany(
                    "INSERT INTO tok(rowid, summary, tags) VALUES (?, ?, ?)",
                    [(index + 1, summary, tags) for index, (summary, tags) in enumerate(texts)],
                )
                for term, doc, column in cursor.execute("SELECT term, doc, col FROM tok_instances"):
                    found[doc - 1][0 if column == "summary" else 1].append(term)
            finally:
                cursor.execute("ROLLBACK")
        return found


os.register_at_fork(after_in_child=QueryTokenizer._forget)  # pyright: ignore[reportPrivateUsage]


@dataclass(frozen=True)
class _Averages:
    rows: int  # FTS5's row count
    tokens: int  # tokens in all columns of all rows


def _averages(connection: Connection) -> _Averages | None:
    """memory_fts's averages record (`%_data` row 1: varints nRow, then each column's token
    total), or None if it is missing or not as expected."""
    block = connection.execute(text("SELECT block FROM memory_fts_data WHERE id = 1")).scalar()
    if not isinstance(block, bytes | memoryview):
        return None
    values = _varints(bytes(block))
    if len(values) < 3:
        return None
    return _Averages(rows=values[0], tokens=values[1] + values[2])


def _varints(data: bytes) -> list[int]:
    """SQLite's big-endian varints (7 bits a byte, the 9th byte all 8)."""
    values: list[int] = []
    index = 0
    while index < len(data):
        value = 0
        for position in range(9):
            if index >= len(data):
                return values
            byte = data[index]
            index += 1
            if position == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values


def _idf(rows: int, hits: int) -> float:
    """fts5_aux.c: log((nRow - nHit + 0.5) / (nHit + 0.5)), or 1e-6 when not positive."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else 1e-6


def _bm25(
    idfs: Sequence[float],
    tokens: Sequence[str],
    columns: tuple[list[str], list[str]],
    weights: Sequence[float],
    avgdl: float,
) -> float:
    """bm25 of one row for phrases of one token each, as fts5_aux.c computes it (-1 x this)."""
    counts = (Counter(columns[0]), Counter(columns[1]))
    length = float(len(columns[0]) + len(columns[1]))
    score = 0.0
    for idf, token in zip(idfs, tokens, strict=True):
        frequency = 0.0
        for column, weight in enumerate(weights):
            for _ in range(counts[column][token]):
                frequency += weight
        score += idf * ((frequency * (_K1 + 1.0)) / (frequency + _K1 * (1 - _B + _B * length / avgdl)))
    return score


def _word_tokens(words: Sequence[str]) -> list[list[str]]:
    """Each quoted word of an FTS5 query as the tokens FTS5 makes of it."""
    return [summary for summary, _ in QueryTokenizer.shared().tokens([(word, "") for word in words])]


@dataclass(frozen=True)
class _Split:
    """The query's words as FTS5 tokens, each word's row count, and which are common."""

    tokens: list[str]
    hits: list[int]
    common: list[int]  # indexes into the words
    rare: list[int]
    bound: float  # above the most the common words can add to a record's score


def _split(connection: Connection, words: Sequence[str], rows: int) -> _Split | None:
    """`words` split by their row counts in the index (of `rows` rows), or None when the plan
    cannot gain: no common word, no other word, or other words about as frequent."""
    tokens: list[str] = []
    hits: list[int] = []
    for word_tokens in _word_tokens(words):
        if len(word_tokens) != 1:
            return None  # a phrase of several tokens: its row count is not in the vocabulary
        found = connection.execute(
            text("SELECT doc FROM memory_fts_vocab WHERE term = :term"), {"term": word_tokens[0]}
        ).scalar()
        tokens.append(word_tokens[0])
        hits.append(int(found) if found is not None else 0)
    common = [index for index, count in enumerate(hits) if count >= _COMMON_SHARE * rows]
    rare = [index for index in range(len(words)) if index not in common]
    if not common or not rare:
        return None
    if 2 * sum(hits[index] for index in rare) > sum(hits[index] for index in common):
        return None  # ranking the other words' matches would cost about as much as all of them
    bound = sum((_K1 + 1.0) * _idf(rows, hits[index]) for index in common)
    # Past any rounding of the sums compared with it.
    return _Split(tokens, hits, common, rare, bound * (1 + 1e-9) + 1e-12)


def _band(
    connection: Connection,
    agent_id: str,
    words: Sequence[str],
    split: _Split,
    k: int,
    channels: list[str] | None,
    weights_sql: str,
) -> list[Any] | None:
    """The compartment's records whose rare-word score could put them among the k best (FTS5's
    rows: rowid, id, score = -bm25 over the rare words, created_at, summary, tags), or None."""
    keep = "r.agent_id = :agent_id"
    params: dict[str, object] = {
        "match": " OR ".join(f'"{words[index]}"' for index in split.rare),
        "agent_id": agent_id,
    }
    if channels is not None:
        keep += " AND r.channel IN (SELECT value FROM json_each(:channels))"
        params["channels"] = json.dumps(channels, ensure_ascii=False)
    sql = text(
        "SELECT hit.rowid AS rowid, r.id AS id, hit.score AS score, coalesce(" + keep + ", 0) AS keep, "
        "r.created_at AS created_at, r.summary AS summary, r.tags AS tags FROM ("
        f"SELECT rowid, bm25(memory_fts, {weights_sql}) AS score FROM memory_fts "
        "WHERE memory_fts MATCH :match ORDER BY score LIMIT :m"
        ") AS hit LEFT JOIN memory_records AS r ON r.rowid = hit.rowid "
        "ORDER BY score, r.created_at DESC, r.id DESC"
    )
    fetch = k * _FIRST_FETCH
    while True:
        rows = connection.execute(sql, {**params, "m": fetch}).all()
        kept = [row for row in rows if row.keep and row.id is not None]
        if len(kept) >= k:
            threshold = -float(kept[k - 1].score)  # θ: the k-th best rare-word score
            if threshold <= split.bound:
                return None
            floor = threshold - split.bound
            if len(rows) < fetch or -float(rows[-1].score) < floor:
                # Every rare-word match that could be among the k best was fetched.
                return [row for row in kept if -float(row.score) >= floor]
            fetch *= 4
        elif len(rows) < fetch or not kept:
            return None  # too few rare-word matches here to bound the common words by
        else:
            fetch = -(-2 * k * fetch // len(kept))  # twice what the compartment's share suggests
        if fetch > k * _MOST_FETCH:
            return None


def keyword_by_bound(
    connection: Connection,
    agent_id: str,
    words: Sequence[str],
    k: int,
    channels: list[str] | None,
    weights: Sequence[float],
) -> list[tuple[str, float]] | None:
    """The k best keyword matches in the compartment (as `keyword_candidates`: (id, -bm25),
    best first, ties to the newer record), or None when this plan does not apply or cannot
    prove its answer. `words` are the query's words, in the order of its FTS5 query."""
    if k <= 0 or len(words) < 2:
        return None
    try:
        return _bounded(connection, agent_id, words, k, channels, weights)
    except Exception as exc:  # only a shortcut: whatever fails here, the plain plans answer
        log.warning("keyword search without the common-word bound: %s", exc)
        return None


def _bounded(
    connection: Connection,
    agent_id: str,
    words: Sequence[str],
    k: int,
    channels: list[str] | None,
    weights: Sequence[float],
) -> list[tuple[str, float]] | None:
    tokenizer = QueryTokenizer.shared()
    if not tokenizer.calibrated(weights):
        return None
    averages = _averages(connection)
    if averages is None or averages.rows <= 0 or averages.tokens <= 0:
        return None
    split = _split(connection, words, averages.rows)
    if split is None:
        return None
    band = _band(connection, agent_id, words, split, k, channels, ", ".join(str(w) for w in weights))
    if band is None:
        return None
    avgdl = averages.tokens / averages.rows
    idfs = [_idf(averages.rows, count) for count in split.hits]
    rare_idfs = [idfs[i] for i in split.rare]
    rare_tokens = [split.tokens[i] for i in split.rare]
    columns = tokenizer.tokens([(row.summary or "", row.tags or "") for row in band])
    scored: list[tuple[float, Any]] = []
    for row, row_columns in zip(band, columns, strict=True):
        if _bm25(rare_idfs, rare_tokens, row_columns, weights, avgdl) != -float(row.score):
            return None  # the index and its records disagree: leave it to FTS5 alone
        scored.append((_bm25(idfs, split.tokens, row_columns, weights, avgdl), row))
    # Best first; ties to the newer record, then the larger id (the plain plans' order),
    # by stable sorts from the last key to the first.
    scored.sort(key=lambda pair: str(pair[1].id), reverse=True)
    scored.sort(key=lambda pair: str(pair[1].created_at), reverse=True)
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [(str(row.id), score) for score, row in scored[:k]]
