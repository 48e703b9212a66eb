"""Keyword search over long-term memory on SQLite (SPEC §5): the FTS5 index `memory_fts`
(migration 3) queried by any of the query's words, scored by bm25.

`keyword_hits` is `SqlMemory.keyword_candidates`' work inside a read transaction. It tries
three plans, cheapest first, each giving the same answer or None: the common-word bound
(`keyword_bound.py`), the index's top-ranked matches (`keyword_by_top`), and the
matches filtered by the compartment (`keyword_by_filter`), which always answers.
`fts_any_query` turns user text into an FTS5 query of the words both backends search
(`sql/search.py`).
"""

from __future__ import annotations

import json

from sqlalchemy import text
from sqlalchemy.engine import Connection

from persyn.store.sql.search import KEYWORD_WEIGHTS, fts_any_words
from persyn.store.sqlite.keyword_bound import keyword_by_bound

__all__ = [
    "fts_any_query",
    "keyword_by_filter",
    "keyword_by_top",
    "keyword_hits",
]


def fts_any_query(query: str) -> str | None:
    """User text as an FTS5 query matching ANY of its words, or None if it has none.

    Words are runs of letters and digits, case-folded and de-duplicated, each quoted as an
    FTS5 string, joined with OR: FTS5 syntax in the text (`*`, `:`, `^`, quotes, parentheses,
    NEAR, AND/OR/NOT, column filters) is only ever plain words. Stop-words and single letters
    are dropped unless nothing else is left ("who are you" still searches); at most 32 words
    are kept. The
    index's porter tokenizer stems the words as it stemmed the records.
    """
    words = fts_any_words(query)
    return None if words is None else " OR ".join(f'"{word}"' for word in words)


# plans ---------------------------------------------------------------------------------------
_WEIGHTS_SQL = ", ".join(str(w) for w in KEYWORD_WEIGHTS)
_TOP_FIRST = 4  # the first top-ranked fetch: 4 x k matches
_TOP_MOST = 64  # the largest second fetch: 64 x k matches; beyond it, the filter plan


def keyword_by_top(
    connection: Connection, agent_id: str, match: str, k: int, channels: list[str] | None
) -> list[tuple[str, float]] | None:
    """`keyword_candidates` from the index's best-ranked matches alone, or None when they
    cannot prove the answer (then `keyword_by_filter` gives it).

    FTS5's bm25 takes its statistics (row count, average length, each term's document
    count) from the whole index whatever else the query filters on, so a record's score is
    the same in both plans, and the compartment's top k are the first k of the global
    ranking that lie in the compartment. The M best matches are fetched from the index with
    no join (every match is still scored, but no row is read and no rowid set is built: 34
    instead of 240 ms at 1M records in one compartment); each is then looked up by rowid.
    The answer is proven when all matches were fetched, or when k of them lie in the
    compartment and the k-th scores strictly better than the M-th (every unfetched match
    scores no better than the M-th, so none ties or beats the k-th: the tie order of the
    k is the filter plan's). Otherwise M grows once, to what the share of the compartment
    among the first M suggests (x4 when only a tie straddled the cut), up to 64 x k; a
    compartment that is a small share of the index goes to the filter plan, cheap there."""
    keep = "r.agent_id = :agent_id"
    params: dict[str, object] = {"match": match, "agent_id": agent_id}
    if channels is not None:
        keep += " AND r.channel IN (SELECT value FROM json_each(:channels))"
        params["channels"] = json.dumps(channels, ensure_ascii=False)
    # LEFT JOIN: an index entry without its row (never expected) still counts as fetched,
    # so a short result always means that every match was fetched.
    sql = text(
        f"SELECT r.id AS id, hit.score AS score, coalesce({keep}, 0) AS keep FROM ("
        f"SELECT rowid, bm25(memory_fts, {_WEIGHTS_SQL}) AS score FROM memory_fts "
        "WHERE memory_fts MATCH :match ORDER BY score LIMIT :m"
        ") AS hit LEFT JOIN memory_records AS r ON r.rowid = hit.rowid "
        "ORDER BY score, r.created_at DESC, r.id DESC"
    )
    fetch = k * _TOP_FIRST
    for _ in range(2):
        rows = connection.execute(sql, {**params, "m": fetch}).all()
        kept = [row for row in rows if row.keep]
        if len(rows) < fetch or (len(kept) >= k and kept[k - 1].score < rows[-1].score):
            return [(str(row.id), -float(row.score)) for row in kept[:k]]
        if len(kept) >= k:
            fetch *= 4  # a tie straddles the cut
        elif kept:
            fetch = -(-2 * k * fetch // len(kept))  # twice what the compartment's share suggests
        else:
            return None
        if fetch > k * _TOP_MOST:
            return None
    return None


def keyword_by_filter(
    connection: Connection, agent_id: str, match: str, k: int, channels: list[str] | None
) -> list[tuple[str, float]]:
    """`keyword_candidates` by scoring only the matches in the compartment: every match
    when `channels` is None, else those among the compartment's rowids."""
    params: dict[str, object] = {"match": match, "agent_id": agent_id, "k": k}
    if channels is None:
        sql = (
            f"SELECT r.id AS id, bm25(memory_fts, {_WEIGHTS_SQL}) AS score FROM memory_fts "
            # CROSS JOIN pins the join order: search the full-text index first, then fetch
            # the matching rows. A plain JOIN lets SQLite scan the agent's records and run
            # the match once per row (22 s per query at 100k records).
            "CROSS JOIN memory_records AS r ON r.rowid = memory_fts.rowid "
            "WHERE memory_fts MATCH :match AND r.agent_id = :agent_id"
        )
    else:
        # The compartment's rowids (from the (agent_id, channel) index) filter the
        # matches inside the full-text scan, so BM25 is computed, and a record row read,
        # only for matches in the compartment: ~4 ms instead of ~8 ms at 100k records in
        # 10 channels, where most matches lie outside it. The unary + keeps the IN a
        # filter: as an index constraint, FTS5 would rerun the match once per rowid.
        sql = (
            f"SELECT r.id AS id, hit.score AS score FROM ("
            f"SELECT rowid, bm25(memory_fts, {_WEIGHTS_SQL}) AS score FROM memory_fts "
            "WHERE memory_fts MATCH :match AND +rowid IN ("
            "SELECT rowid FROM memory_records WHERE agent_id = :agent_id "
            "AND channel IN (SELECT value FROM json_each(:channels)))"
            ") AS hit CROSS JOIN memory_records AS r ON r.rowid = hit.rowid "
            "WHERE r.agent_id = :agent_id"
        )
        params["channels"] = json.dumps(channels, ensure_ascii=False)
    sql += " ORDER BY score, r.created_at DESC, r.id DESC LIMIT :k"
    rows = connection.execute(text(sql), params)
    return [(str(row.id), -float(row.score)) for row in rows]


def keyword_hits(
    connection: Connection, agent_id: str, words: list[str], k: int, channels: list[str] | None
) -> list[tuple[str, float]]:
    """`keyword_candidates`' work, cheapest plan first; each gives the same answer or None:
    the common-word bound (`_sqlite_keyword_bound`), the top-k plan, else the filter plan."""
    found = keyword_by_bound(connection, agent_id, words, k, channels, KEYWORD_WEIGHTS)
    if found is not None:
        return found
    match = " OR ".join(f'"{word}"' for word in words)
    found = keyword_by_top(connection, agent_id, match, k, channels)
    return found if found is not None else keyword_by_filter(connection, agent_id, match, k, channels)
