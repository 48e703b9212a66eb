"""Keyword search on PostgreSQL through block posting lists (`store/postgres/keyword_index.py`, docs
§7.2, issue 20): triggers keep the lists equal to the records' words through every kind of
write — multi-row inserts, deletes across blocks, in-place edits and channel moves, writers
in parallel, records stored before the lists existed — and the ranking is BM25 over the
channels searched, ties to the newer record. A real PostgreSQL (pgserver)."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import NullPool

from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.ops.doctor.postgres import postgres_checks
from persyn.store import open_store
from persyn.store.capabilities import FullStore
from persyn.store.postgres.keyword_index import BLOCK
from persyn.store.postgres.migrations import POSTGRES_MIGRATIONS
from persyn.store.schema.migrations import migrate
from persyn.store.schema.tables import memory_records
from persyn.testing.postgres import PostgresForTests

pytestmark = pytest.mark.services

START = datetime(2026, 2, 1, tzinfo=UTC)
AGENT = derived_id(START, "keyword-agent")
OTHER = derived_id(START, "keyword-other")
MAIN, SIDE = "terminal:terminal", "discord:side"
WORDS = ["lantern", "orchard", "harbour", "violin", "kettle", "meadow", "glacier", "pepper"]


def _record(i: int, *, agent: str = AGENT, channel: str = MAIN, words: str | None = None) -> MemoryRecord:
    at = START + timedelta(minutes=i)
    return MemoryRecord(
        id=derived_id(at, agent, str(i)),
        agent_id=agent,
        created_at=at,
        channel=channel,
        # "river" is in every record: its list spans several blocks.
        summary=words or f"river {WORDS[i % 8]} {WORDS[(i * 3) % 7]} note {i}",
        tags=(WORDS[i % 5],) if i % 3 == 0 and words is None else (),
        importance=1 + i % 10,
        sensitivity=Sensitivity.PUBLIC,
    )


@pytest.fixture
async def url(postgres_server: PostgresForTests) -> str:
    return postgres_server.fresh_schema("kw")


async def _open(url: str) -> FullStore:
    opened = open_store(url)
    await opened.setup()
    await opened.ensure_agent(AGENT, "Ada", START)
    await opened.ensure_agent(OTHER, "Bea", START)
    return opened


@pytest.fixture
async def store(url: str) -> AsyncIterator[FullStore]:
    opened = await _open(url)
    try:
        yield opened
    finally:
        await opened.close()


def _engine(url: str) -> Engine:
    return create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)


def _expected(engine: Engine) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """Postings and channel totals computed here from each record's tsvector: the weighted
    count is summary positions (weight B) + 2 × tag positions (weight A)."""
    postings: Counter[tuple[Any, ...]] = Counter()
    totals: Counter[tuple[Any, ...]] = Counter()
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT r.agent_id, r.channel, r.search_seq, u.lexeme, u.weights "
                "FROM memory_records AS r LEFT JOIN LATERAL unnest(r.search_tsv) AS u ON true"
            )
        ).all()
    records: dict[int, list[tuple[str, list[str]]]] = {}
    where: dict[int, tuple[str, str]] = {}
    for agent_id, channel, seq, lexeme, weights in rows:
        where[seq] = (agent_id, channel)
        if lexeme is not None:
            records.setdefault(seq, []).append((lexeme, list(weights)))
    for seq, (agent_id, channel) in where.items():
        words = records.get(seq, [])
        length = sum(len(weights) for _, weights in words)
        totals[(agent_id, channel, "records")] += 1
        totals[(agent_id, channel, "words")] += length
        for lexeme, weights in words:
            tf = sum(2 if w == "A" else 1 for w in weights)
            postings[(agent_id, lexeme, channel, seq, tf, length)] += 1
    return postings, totals


def _stored(engine: Engine) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]], list[int]]:
    with engine.connect() as connection:
        postings = Counter(
            tuple(row)
            for row in connection.execute(
                text(
                    "SELECT b.agent_id, b.lexeme, b.channel, u.seq, u.tf, u.len FROM memory_postings AS b, "
                    "unnest(b.seqs, b.tfs, b.lens) AS u(seq, tf, len)"
                )
            )
        )
        totals: Counter[tuple[Any, ...]] = Counter()
        for agent_id, channel, records, words in connection.execute(
            text("SELECT agent_id, channel, records, words FROM memory_text_stats")
        ):
            totals[(agent_id, channel, "records")] += records
            totals[(agent_id, channel, "words")] += words
        sizes = [
            int(n)
            for n, length in connection.execute(text("SELECT n, cardinality(seqs) FROM memory_postings"))
            if n == length
        ]
        blocks = int(connection.execute(text("SELECT count(*) FROM memory_postings")).scalar_one())
    assert len(sizes) == blocks, "a block's count differs from its arrays' length"
    return postings, totals, sizes


def _assert_lists_match(url: str) -> list[int]:
    engine = _engine(url)
    try:
        postings, totals = _expected(engine)
        stored, stored_totals, sizes = _stored(engine)
    finally:
        engine.dispose()
    assert stored == postings
    assert +stored_totals == +totals  # channels with no records left have no totals row
    assert 0 not in sizes  # an emptied block is deleted
    return sizes


def _sql(url: str, statement: str, **params: Any) -> None:
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), params)
    finally:
        engine.dispose()


async def test_lists_follow_inserts_deletes_edits_and_moves(store: FullStore, url: str) -> None:
    # A multi-row insert, then single ones, then another batch: "river" spans three blocks.
    await store.add_records([_record(i) for i in range(BLOCK + 40)], None, None)
    for i in range(BLOCK + 40, BLOCK + 60):
        await store.add_record(_record(i), None, None)
    await store.add_records(
        [_record(i, channel=SIDE) for i in range(BLOCK + 60, 2 * BLOCK + 100)], None, None
    )
    await store.add_records([_record(i, agent=OTHER) for i in range(30)], None, None)
    sizes = _assert_lists_match(url)
    assert max(sizes) <= BLOCK  # one writer at a time: blocks never pass their size

    # Deletes in the first block, across the block boundary, and a whole small list.
    doomed = [_record(i).id for i in (*range(0, 20), *range(BLOCK - 5, BLOCK + 5), 77)]
    assert await store.delete_records(AGENT, doomed) == len(doomed)
    _assert_lists_match(url)

    # Edits of the words and of the channel (no store call does these; an operator's SQL or a
    # later feature might), and an edit that touches neither.
    _sql(
        url,
        "UPDATE memory_records SET summary = 'a violin concerto by the harbour' WHERE id = :id",
        id=_record(30).id,
    )
    _sql(
        url,
        "UPDATE memory_records SET channel = :side WHERE id = ANY(:ids)",
        side=SIDE,
        ids=[_record(i).id for i in range(40, 60)],
    )
    _sql(url, "UPDATE memory_records SET importance = 10 WHERE agent_id = :agent", agent=AGENT)
    _assert_lists_match(url)

    # A cull-sized delete (past the few-records path) rebuilds the lists it touches; later
    # writes append after the rebuilt blocks.
    culled = [_record(i).id for i in range(100, 230)]
    assert await store.delete_records(AGENT, culled) == len(culled)
    _assert_lists_match(url)
    await store.add_records([_record(i) for i in range(3000, 3000 + BLOCK)], None, None)
    assert max(_assert_lists_match(url)) <= BLOCK

    # Emptying a channel leaves no totals and no blocks behind for it.
    side = [_record(i).id for i in (*range(40, 60), *range(BLOCK + 60, 2 * BLOCK + 100))]
    await store.delete_records(AGENT, side)
    _assert_lists_match(url)
    assert await store.keyword_candidates(AGENT, "river", 10, [SIDE]) == []
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            left = connection.execute(
                text("SELECT count(*) FROM memory_postings WHERE channel = :side"), {"side": SIDE}
            ).scalar_one()
    finally:
        engine.dispose()
    assert left == 0


def _bm25_reference(url: str, words: Sequence[str], channels: Sequence[str], k: int) -> list[str]:
    """FTS5's BM25 (k1 1.2, b 0.75, idf floored at 1e-6) computed here from the records'
    tsvectors, over the channels' records only; ties to the newer record, then the greater id."""
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            lexemes = set(
                connection.execute(
                    text("SELECT unnest(tsvector_to_array(to_tsvector('persyn_text', :q)))"),
                    {"q": " ".join(words)},
                ).scalars()
            )
            rows = connection.execute(
                text(
                    "SELECT r.id, r.created_at, u.lexeme, u.weights FROM memory_records AS r "
                    "LEFT JOIN LATERAL unnest(r.search_tsv) AS u ON true "
                    "WHERE r.agent_id = :agent AND r.channel = ANY(:channels)"
                ),
                {"agent": AGENT, "channels": list(channels)},
            ).all()
    finally:
        engine.dispose()
    length: Counter[str] = Counter()
    created: dict[str, datetime] = {}
    tf: dict[tuple[str, str], int] = {}
    for record_id, created_at, lexeme, weights in rows:
        record_id = record_id.strip()
        created[record_id] = created_at
        if lexeme is not None:
            length[record_id] += len(weights)
            tf[(record_id, lexeme)] = sum(2 if w == "A" else 1 for w in weights)
    count = len(created)
    average = sum(length.values()) / count
    scores: dict[str, float] = {}
    for lexeme in lexemes:
        holders = [r for r in created if (r, lexeme) in tf]
        idf = max(math.log((count - len(holders) + 0.5) / (len(holders) + 0.5)), 1e-6)
        for r in holders:
            f = tf[(r, lexeme)]
            scores[r] = scores.get(r, 0.0) + idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length[r] / average))
    ranked = sorted(scores, key=lambda r: (round(scores[r], 9), created[r], r), reverse=True)
    return ranked[:k]


async def test_ranking_is_bm25_over_the_channels_searched(store: FullStore, url: str) -> None:
    records = [_record(i, channel=MAIN if i % 4 else SIDE) for i in range(600)]
    records += [
        _record(1000, words="orchard orchard orchard lantern"),  # tf 3, short
        _record(1001, words="a very long note that mentions the orchard once among many other words here"),
    ]
    await store.add_records(records, None, None)
    await store.add_records([_record(i, agent=OTHER, words="orchard lantern") for i in range(50)], None, None)
    for query, channels in (
        (["orchard"], [MAIN]),
        (["orchard", "lantern", "glacier"], [MAIN, SIDE]),
        (["pepper", "violin", "river"], [SIDE]),
        (["note", "meadow"], [MAIN]),  # "note" is everywhere: its idf is floored
    ):
        found = await store.keyword_candidates(AGENT, " ".join(query), 25, channels)
        assert [record_id for record_id, _ in found] == _bm25_reference(url, query, channels, 25)
        assert all(a[1] >= b[1] for a, b in itertools.pairwise(found))
    top = await store.keyword_candidates(AGENT, "orchard", 1, [MAIN])
    assert top[0][0] == _record(1000).id


async def test_a_tie_at_the_cut_goes_to_the_newer_records(store: FullStore) -> None:
    # Forty records with the same words and length score the same: the newest ten win,
    # whatever order they were written in.
    order = [17, 3, 39, 0, 25, *range(40)]
    await store.add_records([_record(i, words="kettle meadow") for i in dict.fromkeys(order)], None, None)
    found = await store.keyword_candidates(AGENT, "kettle", 10, None)
    assert [record_id for record_id, _ in found] == [_record(i).id for i in range(39, 29, -1)]


async def test_parallel_writers_to_the_same_lists_lose_nothing(url: str) -> None:
    stores = [await _open(url) for _ in range(3)]
    try:

        async def write(which: int) -> None:
            # Two writers add to the same lists in both channels; the third also deletes
            # part of each batch it wrote before, a few records (the range path) at a time.
            for batch in range(12):
                base = 10_000 * which + batch * 25
                channel = MAIN if batch % 2 else SIDE
                await stores[which].add_records(
                    [_record(base + i, channel=channel) for i in range(25)], None, None
                )
                if which == 2 and batch:
                    earlier = [_record(base - 25 + i).id for i in range(10)]
                    assert await stores[which].delete_records(AGENT, earlier) == 10

        await asyncio.gather(*(write(w) for w in range(3)))
        sizes = _assert_lists_match(url)
        assert sum(sizes) > 0
        found = await stores[0].keyword_candidates(AGENT, "river", 2000, None)
        assert len(found) == 3 * 12 * 25 - 11 * 10
    finally:
        for opened in stores:
            await opened.close()


async def test_records_stored_before_the_lists_are_indexed_by_the_migration(url: str) -> None:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            migrate(connection, POSTGRES_MIGRATIONS, target=21)
        rows = [_record(i) for i in range(BLOCK + 30)]
        with engine.begin() as connection:
            connection.execute(
                insert(memory_records),
                [
                    {
                        "id": r.id,
                        "agent_id": r.agent_id,
                        "created_at": r.created_at,
                        "channel": r.channel,
                        "participant_ids": [],
                        "summary": r.summary,
                        "importance": r.importance,
                        "tags": list(r.tags),
                        "emotion": None,
                        "sensitivity": r.sensitivity.value,
                        "conversation_id": None,
                        "message_ids": [],
                        "ref": None,
                        "kind": "episode",
                    }
                    for r in rows
                ],
            )
        with engine.connect() as connection:
            migrate(connection, POSTGRES_MIGRATIONS)
    finally:
        engine.dispose()
    _assert_lists_match(url)
    opened = await _open(url)
    try:
        await opened.add_record(_record(5000, words="zeppelin over the harbour"), None, None)
        _assert_lists_match(url)
        found = await opened.keyword_candidates(AGENT, "zeppelin lantern", 3, None)
        assert found[0][0] == _record(5000).id
    finally:
        await opened.close()


async def test_writes_with_the_triggers_off_are_reported_then_repaired_at_start(
    store: FullStore, url: str
) -> None:
    await store.add_records([_record(i) for i in range(40)], None, None)
    assert [c for c in await postgres_checks(url) if c.name == "keyword lists"] == []

    _sql(url, "ALTER TABLE memory_records DISABLE TRIGGER persyn_memory_inserted")
    await store.add_records([_record(i, words=f"zeppelin {i}") for i in range(100, 130)], None, None)
    assert await store.keyword_candidates(AGENT, "zeppelin", 50, None) == []  # the lists missed them
    (check,) = [c for c in await postgres_checks(url) if c.name == "keyword lists"]
    assert not check.ok and "persyn_memory_inserted" in check.detail and "ENABLE TRIGGER" in check.fix

    # Triggers back on: the lists are still short; the next start rebuilds them.
    _sql(url, "ALTER TABLE memory_records ENABLE TRIGGER ALL")
    (check,) = [c for c in await postgres_checks(url) if c.name == "keyword lists"]
    assert not check.ok and "count 40 records" in check.detail and "holds 70" in check.detail
    reopened = await _open(url)
    await reopened.close()
    _assert_lists_match(url)
    assert [c for c in await postgres_checks(url) if c.name == "keyword lists"] == []
    assert len(await store.keyword_candidates(AGENT, "zeppelin", 50, None)) == 30
