"""Recall latency and database size as one agent's memory grows (embedded SQLite store).

For each size, fills a fresh store with synthetic first-person records for one agent —
spread over 10 channels (--channels) and 50 people, a year of history, summaries of 8-16 pseudo-words
drawn with Zipf frequencies from a 20k-word vocabulary, so that full-text posting lists
are as skewed as in real text — embedded with the default encoder and stored through
`Store.add_records` (the bulk path `persyn memory import` uses). Then runs `--queries`
recall queries through `Retriever.retrieve` (default configuration, one channel, two people
present) and prints retrieval latency p50/p99 for hybrid, vector-only and keyword-only
recall, the insert rate (embedding included), and the database size (main file + WAL).

    uv run python bench/memory_scale.py [--sizes 10000,100000] [--million] [--queries 200] [--dims 64]

--million adds 1M records (a few minutes to fill, about 2 GB on disk) with
--million-queries queries per mode. Deterministic: a fixed seed. Timings depend on the
machine and its load: compare runs made under the same conditions.

Measured on a shared 2-core VM (1-minute load 3-4 throughout), p50 ms, hybrid / vector /
keyword. Before: one transaction per record, vectors partitioned by agent only (the channel
a metadata filter), keyword matches joined to every record before the compartment filter.
After: `Store.add_records`, vectors partitioned by (agent, channel), keyword matches
filtered by the compartment's rowids inside the FTS5 scan, lighter candidate fetch.

    records   channels  before: insert/s  hybrid  vector  keyword   after: insert/s  hybrid  vector  keyword   db MB
    10,000    10                 469      24.2    17.7     6.3             3955       9.2     5.9     3.8      25
    100,000   10                 483     172.0   142.4    25.8             3071      22.5    12.1    10.2     202
    100,000   10                                                           3968      18.3    12.2     8.8     202
    1,000,000 10                   -         -       -       -             3356     145.0    90.5    59.4    1921
    100,000   1 (worst case)                                               3349     114.2    81.8    37.6     198

Vector search is exact brute force over the compartment's channels, so its cost follows
the size of the compartment, not of the whole memory: an agent whose memories all sit in
one channel pays for all of them (last row). Migration 16 made a channel of 2,000 vectors
or more searched through binary codes and an exact re-rank (`store/sqlite/ann.py`):

    uv run python bench/memory_scale.py --vector-stage [--stage-sizes 10000,100000,1000000]

measures that vector stage alone (`Store.vector_candidates`, k=100, the retriever's
`candidates`) in ONE compartment holding every vector, against today's exact sqlite-vec
kNN on the same file, with recall@10 against exact search. The vectors are synthetic but
shaped like sentence embeddings (`clustered_vectors`), generated once and cached with the
filled stores under $TMPDIR/persyn-bench-cache (1M: ~1 GB of vectors, ~3.5 GB of store;
the first run fills for several minutes, later runs only query).

Measured 2026-12-02 on the shared 2-core VM under a 1-minute load of 13-21 (other jobs;
absolute times are inflated several-fold, compare within a row), k=100, p50/p95 ms:

    records     exact (before: sqlite-vec)   codes (after: migration 16)   recall@10   load
    10,000           17.9     42.5                   1.3     11.6               0.993      17.0
    100,000         147.4    181.8                   6.1     20.1               0.996      13.2
    1,000,000      2135.2   2404.0                 102.7    165.4               0.997      20.8

Exact timed over 30 queries, codes over 200; recall@10 over 200 against brute force. The
first search of a process loads the partition's codes (~330 MB at 1M; not timed).

2026-12-02, stop 27 (helpers' tests and type checks on both cores: load 11-22). Wall times
under such load say more about the scheduler than the code, so the stage now also prints
`cpu50`, this process's CPU ms per search (p50), which moves far less with load. The search
scans contiguous segments instead of one array per 4,096-entry block, scans the codes' first
128 bits for every entry and the rest only for the ~16 x candidates nearest on them, and
reads the re-rank rows by rowid (NOT INDEXED):

    records     exact p50/p95 (sqlite-vec)   index p50/p95   cpu50   recall@10   load
    100,000 before   50.9     55.1                3.4     4.4      -       0.996       1.8
    100,000 after   508.2    678.7               37.6   101.9     5.2      0.996      15.1
    1,000,000 before 2284.7  5523.3             109.7   168.6      -       0.997      13.9
    1,000,000 after  5578.3  7304.3             179.2   534.0    30.0      0.994      22.2
    1,000,000 before 1831.2  2008.7              65.2   118.7    25.6      0.997      11.5
    100,000 final    59.1    109.3                3.7     9.9     3.3      0.996       6.8
    1,000,000 final 586.1    896.5               16.9    35.6    14.3      0.994       5.3

The exact column, the same code in every row, shows what the load did. The "after" rows
were a first version whose int8 re-rank was one 5,000 x 256 `@`: large enough for OpenBLAS to
wake its threads, which spun for as much CPU again (thread CPU 17.1 ms, process CPU 34.0
ms); the final rows use einsum. Back to back at load 7-13, the search alone
(`_sqlite_ann.search` called on one thread, 100 queries at 1M) went from 24.1 to 13.2 CPU ms
p50, recall@10 0.997 -> 0.994 (the second 1M "before" row is the old code through this bench,
`PYTHONPATH=/work/main/src`, at load 11.5). Where the 1M search's CPU went before (ms p50,
thread time): Hamming scan 8.6, threshold histogram 3.5, int8 re-rank of 5,000 candidates 2.4
+ their gather 0.7, selection 0.9, re-rank rows read 1.3, block versions 0.7; the prefilter
halves the first two.

On PostgreSQL (`--store postgresql`: pgvector HNSW, m=16, ef_construction=64, ef_search 200
for k=100; exact = a sequential scan and sort of the compartment; cpu50 counts only this
client, not the server):

    records     insert/s   exact p50/p95    HNSW p50/p95   recall@10   load
    10,000         437       3.4     9.2       4.5   13.2     1.000       2.6
    100,000        101     111.8   146.7      38.7  132.3     0.994      11.1
    100,000          -      39.6    63.0       6.7   10.8     0.994       3.5   (the same store, queried again)

Full recall in ONE compartment of 100k records (`--sizes 100000 --channels 1 --queries 100`,
WordLlama 256-d; p50/p99 ms, and this process's CPU ms p50 where printed):

    backend      insert/s  db MB   hybrid           vector               keyword              load
    sqlite          336     409    364.8 2429.9 (cpu 44.7)  101.7 218.8 (cpu 11.1)  619.9 2051.3 (cpu 36.8)  19.1
    sqlite         4029     409     35.7  193.5 (cpu 34.7)    6.5  11.5 (cpu  6.5)   28.3   75.1 (cpu 27.8)   3.8
    sqlite 1M      2367    3953    296.6 1894.5 (cpu 266)    27.3  41.2 (cpu 19.9)  270.9  694.2 (cpu 250)    4.2
    postgresql       75     349    110.9  300.1             53.9 152.0              72.3  136.8             13.9

On SQLite the vector stage is no longer what costs: keyword search (FTS5 restricted to the
compartment's rowids, which in one busy channel are all of them) is 28 of the hybrid's 35 ms
at load 3.8, where the same row measured before this session's change was hybrid 114.2, vector
81.8, keyword 37.6 (load 3-4, the first table). On PostgreSQL the client's CPU was not printed in that run; the server's is in another
process. At 1M records in one compartment (`--million --channels 1 --million-queries 30`)
the vector stage stays under 30 ms and keyword search is the whole cost: 271 ms p50, 250 CPU
ms, of the hybrid's 297.

The fill is the cost on PostgreSQL: the HNSW graph is built row by row as records arrive,
101 records/s at 100k under load 11 (16 minutes), so 1M (3 hours at that rate, or a bulk
`CREATE INDEX` that the store does not do) did not fit this session.

2026-12-02, stop 28, PostgreSQL bulk loads (`Store.bulk_load`, docs/architecture.md §7.2): the
fills now run inside `store.bulk_load(count)`, which takes the HNSW index away, writes vectors
with COPY and builds the index once at the end; the bench prints the two parts. The bench's own
pgserver keeps a filled full-recall store (`pgscale-<size>-<seed>.done` in the cache directory)
and the next run with the same --channels/--dims only queries it. Full recall in ONE channel
(`--store postgresql --sizes 100000 --channels 1 --queries 100`; `--sizes "" --million
--channels 1 --million-queries 30`), WordLlama 256-d, the same records and vectors as the SQLite
rows above (fixed seed), p50/p99 ms and this process's CPU ms p50; the server's CPU is not counted:

    records    fill: rows  index build  insert/s  db MB   hybrid             vector           keyword          load
    100,000        85 s        57 s        704      350    79.4 152.4 (12.6)  18.6 41.4 (6.3)  30.9  96.5 (5.8)  7.9
    100,000    (the same store; recall_candidates from driver rows)   54.3 703.5 (10.5)  13.2 23.7 (5.3)  18.6  31.8 (4.8)  5.2
    1,000,000     803 s      1212 s        496     3454   288.8 1607.6 (12.2) 25.9 36.9 (6.2) 192.2 301.6 (6.3)  5.4

Before (row by row into the graph): 75-101 records/s at 100k, ~3 h for 1M; now the 1M fill takes
34 minutes (load 5-8: another helper was compiling llama.cpp), of which the index build is 20 (two
parallel workers, maintenance_work_mem 1.6 GB). The first row was measured while the 1M fill ran
and with the old `recall_candidates` (SQLAlchemy rows, every record built: 12 ms of each hybrid
query at 100k, twice per query); the second after it read driver rows (5 ms). Not the goal: SQLite
gives 23.9 / 6.8 / 11.9 at 100k and 61.5 / 18.1 / 41.4 at 1M. The vector stage is close (HNSW); the
keyword stage is what PostgreSQL loses, at 1M by ~5x. EXPLAIN (ANALYZE, BUFFERS) of a bench query
at 1M: the GIN bitmap finds ~50k matches in 15 ms; the bitmap heap scan then reads ~36-40k heap
pages (one per match: pgserver's shared_buffers is 128 MB, the table 1.1 GB; the first scan after
the load also writes hint bits, `written=14984`) and `ts_rank` scores every match: 400 ms with two
parallel workers, 1.3 s cold. A rank-limited plan that scores only the matches of rare terms is
not exact for ts_rank: a record matching one common term several times in its tags (weight A) can
outscore one matching two rare terms once in its summary (B), and no bound on a term's best score
is kept, so it would change answers; it was not built. What would: a ranking with per-term
statistics (bm25, as SQLite's) kept beside the tsvector, which allows MaxScore; a server with the
table in shared_buffers; RUM (ordered GIN) is not in pgserver's build.

2026-12-02, stop 29, migration 22 (docs/architecture.md §7.2): keyword search on PostgreSQL reads
block posting lists kept by triggers and scores BM25 with numpy, and the bench gives its pgserver
shared_buffers of a quarter of the machine's memory, at most 4 GB (`_configure_buffers`). The
same stores and queries (the 1M store refilled: 1,000,000 rows at ~1,300/s with the triggers, then
the index build; migrated in place it took ~1.5 min), load ~1:

    records   hybrid p50        vector p50     keyword p50
    100,000   21.1 - 21.2       16.6 - 17.5     8.8 - 9.7     (was 54.3 / 13.2 / 18.6)
    1,000,000 34.8 - 37.2       24.2 - 31.3    24.8 - 25.4    (was 288.8 / 25.9 / 192.2)

With 128 MB of shared_buffers the 1M row read 62.3 / 42.8 / 27.2 (the new keyword search, the HNSW
walk reading the index from the OS cache), with 3 GB 38.2-46.1 / 28.6 / 27.1.

The vector stage at 1M on PostgreSQL (`--vector-stage --stage-sizes 1000000 --store postgresql`,
bulk fill 412 s of rows + 531 s of index build at load ~3, m 16, ef_construction 64):

    records     insert/s   exact p50/p95    HNSW p50/p95   cpu50   recall@10   load
    1,000,000     1060     249.3   273.9     16.1   20.5     1.6     0.980       2.8

ef_search tuned on that index (200 queries straight through psycopg, load ~1): 200 gave recall@10
0.980 at 14.8 ms p50, 300 0.988 at 19.4 ms, 400 0.989 at 25.0 ms; the store's floor is now 300.

2026-12-02, stop 27, keyword search in a large compartment: the store now first fetches the
index's 4 x k best-ranked matches with no join and keeps those in the compartment, falling back
to the compartment-filter plan when they cannot prove the top k (docs/architecture.md §7.1).

    uv run python bench/memory_scale.py --keyword-stage [--stage-sizes 100000,1000000] [--queries 100]

times keyword search alone (k=100) on the full-recall records in ONE channel with no vectors
(cached as keyword-<size>-<seed>.db), the filter plan against `Store.keyword_candidates`, and
counts the queries the new plan proved without falling back. Load 2.9-3.4, ms:

    records     plan      p50      p95   cpu50   proven
    100,000     filter    24.2     57.5    23.4
    100,000     store      5.4     22.2     5.3   100/100
    1,000,000   filter   254.6    644.6   240.4
    1,000,000   store     33.6    206.5    32.7   100/100

Full recall in one compartment afterwards (`--sizes 100000 --million --channels 1 --queries 100
--million-queries 30`), p50 ms and CPU ms p50, against the rows above:

    records     insert/s  db MB   hybrid           vector            keyword           load
    100,000       2307     409     23.9 (cpu 15.3)   6.8 (cpu  6.6)   11.9 (cpu  9.1)   5.4
    1,000,000     2279    3953     61.5 (cpu 56.9)  18.1 (cpu 17.2)   41.4 (cpu 38.7)   3.3

LoCoMo (`bench/locomo.py`, back to back, load ~4) gives the same recall before and after
(hybrid all@5 0.759 / 0.714, observations / session summaries): the plans return the same
candidates in the same order. Its small compartments' keyword p50 went 3.12 -> 3.42 and
2.13 -> 2.59 ms (noise, or the lookups of other compartments' matches; not measured further). The goals (20 and 50 ms hybrid p50) are not met yet: scoring
every match of an OR query over common words is most of what keyword search still costs.

2026-12-02, stop 28: recall's vector and keyword searches run side by side (each its own read
thread and transaction, not one read batch), and full-recall stores are kept in the cache directory
(`--fresh` refills). `--sizes 100000 --million --channels 1 --dims 256 --million-queries 60`, load
0.9-1.1:

    records     insert/s  db MB   hybrid p50/p99/cpu    vector p50/p99/cpu  keyword p50/p99/cpu
      100,000       2795   378.8   14.7 / 250.3 / 19.0   7.7 / 11.5 / 7.7    9.8 / 32.0 / 9.9
    1,000,000       1145  3771.6   49.8 / 287.3 / 65.1  18.3 / 21.0 / 18.4  44.0 / 287.5 / 44.0

(1M over four runs: hybrid 49.8-52.0 p50.) Before, the same stores with `main`: 1M hybrid 69.3 p50.

2026-12-02, stop 29: read connections memory-map the file (`PRAGMA mmap_size` 4 GiB). The same
command at 1M only (`--sizes ""`), three rounds alternating with the code before, measured beside
a CI run (load 2.1-4.9, so not comparable with the quiet rows above), p50 ms (CPU ms p50):

    records     before: hybrid    keyword          after: hybrid    keyword
    1,000,000       60.2 (70.3)  48.5 (45.0)              69.6 (68.6)  47.3 (45.1)
    1,000,000      120.2 (81.5)  49.1 (47.0)              79.6 (69.7)  47.7 (41.8)
    1,000,000       91.1 (82.6)  73.1 (52.4)              70.1 (70.2)  51.6 (47.7)
      100,000       24.5 (22.4)  11.4 (10.9)              16.6 (17.2)   8.8 ( 8.7)   (--sizes 100000)

Scoring the keyword matches in two rowid ranges on two threads was tried and lost in every
interleaved run (docs/architecture.md §7.1).

2026-12-02, stop 30: the quiet figures of the mapped reads (load 0.3-0.9; two runs each, the same
commands at 100k and 1M as in stop 28). The bench now loads the encoder before timing, as a process
that runs turns does at start: the first hybrid query no longer waits ~0.3 s for WordLlama's weights.

    records     insert/s  db MB   hybrid p50/p99/cpu    vector p50/p99/cpu  keyword p50/p99/cpu
      100,000       2795   378.8   11.2 /  39.1 / 14.8   5.8 /  6.5 / 5.9    8.1 / 29.0 / 8.1
    1,000,000       1145  3771.6   40.7 / 290.6 / 55.0  14.9 / 18.1 / 15.0  36.9 / 254.8 / 36.9

(1M: 40.7 and 42.4 ms hybrid p50 quiet, 46.3 at load 1.2; 100k 11.2 and 11.5.) The 1M p99 is a few
OR queries over words in 30-70 % of the records, which FTS5 ranks in full.

2026-12-02, stop 30: recall's searches bring their candidates (`Store.vector_recall` /
`keyword_recall`, docs/architecture.md §7.2): on PostgreSQL the nearest hits joined to their rows
in one statement, and the keyword candidates read in the keyword search's transaction; on SQLite
both fetches in the search's own transaction. Before (`PYTHONPATH=/work/main/src`) and after,
interleaved, load 1.0-1.3, p50 ms (CPU ms p50):

    store       records     before: hybrid     vector       keyword      after: hybrid     vector       keyword
    postgresql    100,000          15.0 (10.1)  10.1 (4.9)    7.4 (5.5)          12.2 (7.7)    8.7 (3.6)    6.4 (4.6)
    postgresql    100,000          14.3 ( 9.9)  10.4 (5.0)    7.4 (5.4)          12.4 (7.8)    8.8 (3.5)    6.5 (4.6)
    postgresql  1,000,000          27.0 (16.9)  16.6 (4.8)   17.8 (11.4)         21.2 (14.0)  15.6 (3.8)   16.9 (10.7)
    postgresql  1,000,000          27.5 (17.5)  16.8 (4.9)   18.5 (11.7)         23.6 (14.0)  16.3 (3.8)   16.7 (10.4)
    sqlite        100,000          11.6 (15.3)   6.0 (6.1)    8.2 (8.2)          10.1 (13.7)   5.9 (5.9)    7.8 (7.8)
    sqlite        100,000          11.4 (14.6)   5.9 (6.0)    8.3 (8.3)          10.3 (14.0)   5.9 (5.9)    7.8 (7.9)

A keyword variant that ranked the records at the cut in SQL and read the candidates in that
statement gave keyword 5.8 / 5.8 at 100k, but 2-2.5x the server time where thousands tie at the cut,
so it was not kept.

2026-12-02, stop 30, everything together (the encoder loaded first, the common-word bound on
SQLite, the searches bringing their candidates), load 1.3-1.9, p50 / p99 ms:

    store       records     hybrid          vector          keyword
    sqlite        100,000   10.7-11.0 / 32-64   5.5-5.7 / 7-12   8.3-8.6 / 14.4
    sqlite      1,000,000   41.1-43.6 / 90-570  14.7-16.2 / 19-26  36.6-38.6 / 54-61
    postgresql    100,000   11.6-12.0 / 30-33   8.4-8.6 / 9-12   6.2 / 10-11
    postgresql  1,000,000   20.9 / 40.7         16.1 / 21.5      16.6 / 26.2

The SQLite keyword p99 at 1M went 255 -> 54-61 ms (the bound plan; 100k: 29 -> 14.4). The 570 ms
hybrid p99 was the first run after the merge (cold pages); the second gave 90.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from persyn.core.config import MemoryConfig
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory._query import analyse_query
from persyn.memory.embedder import Embedder, embedder_from_config, warm_embedder
from persyn.memory.retrieval import Mode, Retriever
from persyn.store import open_store
from persyn.store.capabilities import FullStore
from persyn.store.sqlite.engine import _sqlite_vec_path, sqlite_dbapi  # pyright: ignore[reportPrivateUsage]
from persyn.store.sqlite.keyword_index import fts_any_query, keyword_by_filter, keyword_by_top
from persyn.store.sqlite.store import SQLiteStore

SEED = 20260301
START = datetime(2025, 3, 1, tzinfo=UTC)
NOW = START + timedelta(days=366)
CHANNELS = [f"discord:room-{i}" for i in range(9)] + ["terminal:terminal"]
PEOPLE = [derived_id(START, "person", str(i)) for i in range(50)]
NAMES = [
    "Ann", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ida", "Jo", "Kit", "Lou", "Max", "Ned",
    "Oli", "Pia", "Quin", "Rae", "Sam", "Tess", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe",
]  # fmt: skip
FUNCTION_WORDS = [
    "I",
    "the",
    "a",
    "and",
    "with",
    "about",
    "that",
    "we",
    "it",
    "to",
    "of",
    "on",
    "in",
    "for",
    "was",
    "my",
    "her",
    "his",
    "their",
    "then",
]
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
VOCABULARY = 20_000
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")


class Words:
    """Pseudo-words with Zipf frequencies (rank r drawn with weight 1/r) over a 20k-word
    vocabulary: posting lists as skewed as real text — a few words everywhere, most rare —
    which is what full-text search cost depends on."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.vocabulary = [self._word(rank) for rank in range(VOCABULARY)]
        cumulative: list[float] = []
        total = 0.0
        for rank in range(VOCABULARY):
            total += 1.0 / (rank + 1)
            cumulative.append(total)
        # The 100 commonest ranks play the part of stop words, which search drops anyway:
        # content words start below them. (Sliced once: slicing per draw dominated filling.)
        # Cumulative weights must start from zero: sliced from the full list they started
        # at H(100), and half of all draws fell on rank 100 — one word in nearly every record.
        self.content = self.vocabulary[100:]
        self.content_cumulative = [c - cumulative[99] for c in cumulative[100:]]

    @staticmethod
    def _word(rank: int) -> str:
        parts: list[str] = []
        value = rank + len(SYLLABLES)
        while value:
            value, digit = divmod(value, len(SYLLABLES))
            parts.append(SYLLABLES[digit])
        return "".join(parts)

    def draw(self, count: int) -> list[str]:
        return self.rng.choices(self.content, cum_weights=self.content_cumulative, k=count)


def _summary(words: Words, rng: random.Random) -> str:
    who = rng.choice(NAMES)
    content = words.draw(rng.randint(8, 16))
    glue = rng.choices(FUNCTION_WORDS, k=len(content))
    body = " ".join(f"{g} {c}" for g, c in zip(glue, content, strict=True))
    return f"I talked with {who}: {body}."


def _records(agent_id: str, count: int, channels: int = len(CHANNELS)) -> list[MemoryRecord]:
    rng = random.Random(SEED)
    words = Words(rng)
    spacing = timedelta(days=365) / count
    records: list[MemoryRecord] = []
    for index in range(count):
        at = START + spacing * index
        records.append(
            MemoryRecord(
                id=derived_id(at, agent_id, str(index)),
                agent_id=agent_id,
                created_at=at,
                # The last `channels` channels: the one recall runs in is always among them.
                channel=CHANNELS[len(CHANNELS) - channels + index % channels],
                participant_ids=tuple(rng.sample(PEOPLE, 2)),
                summary=_summary(words, rng),
                importance=rng.randint(1, 10),
                sensitivity=Sensitivity.PUBLIC,
            )
        )
    return records


def _queries(records: Sequence[MemoryRecord], count: int) -> list[str]:
    """Questions about stored memories: a few content words of a random record, a name,
    and a word or two it does not contain."""
    rng = random.Random(SEED + 1)
    words = Words(rng)
    queries: list[str] = []
    for record in rng.sample(list(records), count):
        body = record.summary.split(":", 1)[1].rstrip(".").split()
        content = [w for w in body if w not in FUNCTION_WORDS]
        picked = rng.sample(content, min(3, len(content))) + words.draw(rng.randint(1, 2))
        queries.append(f"what did {rng.choice(NAMES)} say about the {' '.join(picked)}?")
    return queries


# where the stores live ------------------------------------------------------------------------
@dataclass
class Backend:
    """Where the bench's stores live: a SQLite file per store (the default), or a PostgreSQL
    database per store — on the server `--store postgresql://…` names (each store in a schema
    of its own there), or on a pgserver this bench starts with its data under the cache
    directory, so a filled stage store survives to the next run."""

    url: str | None = None  # None: SQLite
    server: Any = None  # a PostgresForTests this bench started
    made: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "sqlite" if self.url is None else "postgresql"

    @classmethod
    def from_argument(cls, store: str) -> Backend:
        if store == "sqlite":
            return cls()
        if store == "postgresql":
            from persyn.testing.postgres import PostgresForTests

            directory = _cache_dir() / "pgserver"
            directory.mkdir(exist_ok=True)
            server = PostgresForTests(directory)
            if _configure_buffers(server.url()):
                server.stop()  # shared_buffers takes a restart
                server = PostgresForTests(directory)
            return cls(url=server.url(), server=server)
        if make_url(store).get_backend_name() != "postgresql":
            raise SystemExit(f"--store {store!r}: expected 'sqlite', 'postgresql' or a postgresql:// URL")
        return cls(url=store)

    def store_url(self, name: str, *, fresh: bool = True) -> str:
        """The URL of the PostgreSQL store `name` (a database on our own server, a schema on
        someone else's), emptied first when `fresh`."""
        assert self.url is not None
        engine = _engine(self.url)
        try:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                if self.server is not None:
                    if fresh:
                        connection.execute(text(f"DROP DATABASE IF EXISTS {name}"))
                    exists = connection.execute(
                        text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
                    ).first()
                    if exists is None:
                        connection.execute(text(f"CREATE DATABASE {name}"))
                else:
                    if fresh:
                        connection.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
                    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {name}"))
        finally:
            engine.dispose()
        if self.server is not None:
            return str(self.server.url(name))
        joiner = "&" if "?" in self.url else "?"
        return f"{self.url}{joiner}options=-csearch_path%3D{name},public"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _shared_buffers_mb() -> int:
    """What a server of its own would be given: a quarter of the machine's memory (the
    PostgreSQL documentation's starting point), at most 4 GB (the 1M store's tables and
    indexes are ~4 GB)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(memory // 4, 4 << 30) >> 20


def _configure_buffers(url: str) -> bool:
    """Set the bench's own server's shared_buffers (pgserver starts with PostgreSQL's 128 MB
    default, which at 1M records held neither the HNSW index nor the posting lists: vector
    p50 42.8 ms against 28.6 with 3 GB, the same store and queries, load ~0.8). True when
    the setting changed and the server must restart."""
    wanted = _shared_buffers_mb()
    engine = _engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            pages = connection.execute(
                text("SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'")
            )
            current = int(pages.scalar_one()) * 8 // 1024  # in 8 kB pages
            if current >= wanted:
                return False
            connection.execute(text(f"ALTER SYSTEM SET shared_buffers = '{wanted}MB'"))
    finally:
        engine.dispose()
    return True


def _engine(url: str) -> Any:
    return create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)


def _pg_size_mb(url: str) -> float:
    """Tables, their indexes and TOAST in the store's schema."""
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            size = connection.execute(
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return int(size) / 1e6


async def _fill(store: FullStore, embedder: Embedder, records: Sequence[MemoryRecord]) -> float:
    started = time.perf_counter()
    batch = 2048
    async with store.bulk_load(len(records)):  # the HNSW index built once, at the end
        for offset in range(0, len(records), batch):
            chunk = records[offset : offset + batch]
            vectors = await embedder.embed([r.summary for r in chunk])
            await store.add_records(chunk, vectors, embedder.name)
        loaded = time.perf_counter()
    _print_fill(len(records), started, loaded)
    return len(records) / (time.perf_counter() - started)


def _print_fill(count: int, started: float, loaded: float) -> None:
    """The fill's two parts: writing the rows, then (PostgreSQL) building the index."""
    now = time.perf_counter()
    print(
        f"  filled {count:,} records: load {loaded - started:.0f} s, index build {now - loaded:.0f} s "
        f"(load {os.getloadavg()[0]:.1f})",
        flush=True,
    )


def _size_mb(path: Path) -> float:
    files = [path, path.with_name(path.name + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists()) / 1e6


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(
    backend: Backend, size: int, query_count: int, dims: int, channels: int, tmp: Path, *, fresh: bool
) -> str:
    config = MemoryConfig(embedder_dims=dims)
    embedder = embedder_from_config(config)
    # A filled store is kept for the next run (the same records and vectors each time: fixed
    # seed), named by its size and remembered with its channels and dims: a SQLite file in the
    # cache directory, or a database on the bench's own pgserver. `--fresh` fills anew.
    on_sqlite = backend.url is None
    done = _cache_dir() / f"{'' if on_sqlite else 'pg'}scale-{size}-{SEED}.done"
    path = _cache_dir() / f"scale-{size}-{SEED}.db" if on_sqlite else tmp / f"scale-{size}.db"
    config_key = f"{channels} {dims}"
    cached = (
        (on_sqlite or backend.server is not None)
        and not fresh
        and done.exists()
        and done.read_text().split(" ")[:2] == config_key.split(" ")
    )
    if on_sqlite and not cached:
        done.unlink(missing_ok=True)
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)
    url = backend.store_url(f"scale_{size}", fresh=not cached) if backend.url is not None else None
    store: FullStore = SQLiteStore(path) if url is None else open_store(url)
    await store.setup()
    try:
        agent_id = derived_id(START, "scale-agent", str(size))
        records = _records(agent_id, size, channels)
        if cached:
            rate = float(done.read_text().split(" ")[2])
            print(f"  reusing the filled store of {size:,} records ({done})", flush=True)
        else:
            done.unlink(missing_ok=True)
            await store.ensure_agent(agent_id, "scale", START)
            rate = await _fill(store, embedder, records)
            if on_sqlite or backend.server is not None:
                done.write_text(f"{config_key} {rate:.0f}")
        # What a process that runs turns does as it starts (`Runtime._warm_recall`): the
        # timings below are then those of a running agent, not of its first recall.
        started = time.perf_counter()
        await warm_embedder(embedder)
        await store.warm_recall(agent_id)
        print(f"  recall warmed in {time.perf_counter() - started:.1f} s", flush=True)
        queries = _queries(records, query_count)
        retriever = Retriever(store, embedder, config)
        present = PEOPLE[:2]
        cells: list[str] = []
        cpu: list[float] = []
        for mode in MODES:
            timings: list[float] = []
            for query in queries:
                started, cpu_started = time.perf_counter(), time.process_time()
                await retriever.retrieve(
                    agent_id,
                    query,
                    channel=CHANNELS[-1],
                    participants=present,
                    now=NOW,
                    budget_tokens=2_800,
                    mode=mode,
                )
                timings.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - cpu_started) * 1000)
            cells.append(f"{statistics.median(timings):>8.1f} {_percentile(timings, 0.99):>8.1f}")
            cells.append(f"{statistics.median(cpu):>7.1f}")
            cpu.clear()
        load = os.getloadavg()[0]  # the machine's 1-minute load while this row was measured
        megabytes = _size_mb(path) if url is None else _pg_size_mb(url)
        return (
            f"{size:>9,} {rate:>9.0f} {megabytes:>9.1f} {query_count:>7} "
            + " ".join(cells)
            + f" {load:>5.1f}"
        )
    finally:
        await store.close()


async def run(
    backend: Backend, sizes: Sequence[tuple[int, int]], dims: int, channels: int, *, fresh: bool = False
) -> None:
    embedder = embedder_from_config(MemoryConfig(embedder_dims=dims))
    print(f"{backend.name}; encoder {embedder.name}; one agent, {channels} channel(s), 50 people\n")
    header = f"{'records':>9} {'insert/s':>9} {'db MB':>9} {'queries':>7} "
    header += " ".join(f"{m + ' p50':>8} {m[:3] + ' p99':>8} {m[:3] + ' cpu':>7}" for m in MODES)
    header += f" {'load':>5}"
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size, query_count in sizes:
            row = await _measure(backend, size, query_count, dims, channels, Path(tmp), fresh=fresh)
            print(row, flush=True)
            rows.append(row)
    print()
    print(header + "   (latencies in ms; cpu: this process's CPU ms per recall, p50)")
    for row in rows:
        print(row)


# the vector stage in one compartment ----------------------------------------------------------
STAGE_K = 100  # [memory] candidates
STAGE_CHANNEL = "terminal:terminal"
EXACT_TIMED = 30  # queries timed through the exact search


def clustered_vectors(count: int, dims: int = 256, seed: int = SEED) -> np.ndarray[Any, Any]:
    """Unit vectors shaped like sentence embeddings rather than uniform noise: a common
    direction every vector shares (norm 0.9: embeddings are anisotropic, their mean is far
    from zero), 2,000 topic clusters of Zipf-like sizes (weight 1/rank^0.8), and a spread
    within each cluster as large as the distance between centres, with a decaying spectrum
    (variance 1/i^0.6 along a random basis). Nearest neighbours then sit at cosine ~0.8
    against a median of ~0.4, and the last few of a top-10 are close calls: harder for a
    binary code than the WordLlama embeddings of the records above (recall@10 0.95 vs
    0.99 at 100k, same method). The last rows are the queries: from the same
    distribution, not stored."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((dims, dims)))[0].astype(np.float32)
    spectrum = (1.0 / np.arange(1, dims + 1) ** 0.6).astype(np.float32)
    common = rng.standard_normal(dims).astype(np.float32)
    common *= 0.9 / np.linalg.norm(common)
    clusters = 2_000
    centres = (rng.standard_normal((clusters, dims)).astype(np.float32) * spectrum) @ basis.T
    centres *= 0.8 / np.sqrt((centres**2).sum(1).mean())
    weights = 1.0 / np.arange(1, clusters + 1) ** 0.8
    weights /= weights.sum()
    out = np.empty((count, dims), np.float32)
    for start in range(0, count, 100_000):
        size = min(count, start + 100_000) - start
        noise = (rng.standard_normal((size, dims)).astype(np.float32) * spectrum) @ basis.T
        noise *= 1.0 / np.sqrt((noise**2).sum(1).mean())
        rows = common + centres[rng.choice(clusters, size, p=weights)] + noise
        out[start : start + size] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def _cache_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "persyn-bench-cache"
    path.mkdir(exist_ok=True)
    return path


def _cached_vectors(count: int, queries: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    path = _cache_dir() / f"clustered-{count}-{queries}-{SEED}.npy"
    if not path.exists():
        np.save(path.with_suffix(".tmp.npy"), clustered_vectors(count + queries))
        path.with_suffix(".tmp.npy").rename(path)
    vectors = np.load(path, mmap_mode="r")
    return vectors[:count], np.asarray(vectors[count:])


def _stage_agent(count: int) -> str:
    return derived_id(START, "stage-agent", str(count))


def _stage_ids(count: int) -> list[str]:
    """The stage records' ids, in the order of their vectors."""
    agent_id, spacing = _stage_agent(count), timedelta(days=365) / count
    return [derived_id(START + spacing * i, agent_id, str(i)) for i in range(count)]


async def _fill_stage(store: FullStore, count: int, vectors: np.ndarray[Any, Any]) -> float:
    agent_id = _stage_agent(count)
    await store.ensure_agent(agent_id, "stage", START)
    spacing = timedelta(days=365) / count
    ids = _stage_ids(count)
    started = time.perf_counter()
    batch = 4096
    async with store.bulk_load(count):
        for offset in range(0, count, batch):
            records = [
                MemoryRecord(
                    id=ids[i],
                    agent_id=agent_id,
                    created_at=START + spacing * i,
                    channel=STAGE_CHANNEL,
                    summary=f"memory number {i}",
                    importance=5,
                    sensitivity=Sensitivity.PUBLIC,
                )
                for i in range(offset, min(count, offset + batch))
            ]
            chunk = np.asarray(vectors[offset : offset + len(records)])
            await store.add_records(records, [row.tolist() for row in chunk], "clustered")
        loaded = time.perf_counter()
    _print_fill(count, started, loaded)
    return count / (time.perf_counter() - started)


async def _stage_store(backend: Backend, count: int, vectors: np.ndarray[Any, Any]) -> tuple[str, float]:
    """The URL of a store holding `vectors` in one channel of one agent (filled once, then
    cached: a SQLite file, or a database on the bench's own pgserver), and its fill rate."""
    path: Path | None = None
    if backend.url is None:
        path = _cache_dir() / f"stage-{count}-{SEED}.db"
        done = path.with_suffix(".done")
        url = f"sqlite:///{path}"
    else:
        done = _cache_dir() / f"pgstage-{count}-{SEED}.done"
        cached = backend.server is not None and done.exists()
        url = backend.store_url(f"stage_{count}", fresh=not cached)
        if not cached:
            done.unlink(missing_ok=True)
    if done.exists():
        return url, float(done.read_text())
    if path is not None:
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
    store = open_store(url)
    await store.setup()
    try:
        rate = await _fill_stage(store, count, vectors)
    finally:
        await store.close()
    if backend.url is None or backend.server is not None:
        done.write_text(f"{rate:.0f}")
    return url, rate


def _exact_search(path: Path) -> Any:
    """Today's exact kNN as the store ran it before migration 16 (and still does below
    2,000 vectors): sqlite-vec, the (agent, channel) partition."""
    connection = sqlite_dbapi().connect(str(path))
    connection.enable_load_extension(True)
    connection.load_extension(_sqlite_vec_path())
    return connection


def _time_exact(url: str, count: int, queries: np.ndarray[Any, Any]) -> list[float]:
    """Milliseconds per exact k-nearest search of the compartment: sqlite-vec's scan on
    SQLite, a sequential scan and sort (the HNSW index hidden by `+ 0`) on PostgreSQL."""
    agent_id = _stage_agent(count)
    timings: list[float] = []
    if url.startswith("sqlite"):
        exact = _exact_search(Path(make_url(url).database or ""))
        sql = (
            "SELECT record_id, distance FROM memory_vectors_256 WHERE embedding MATCH ? AND k = ? "
            "AND agent_id = ? AND channel = ? ORDER BY distance"
        )
        for query in queries:
            started = time.perf_counter()
            exact.execute(
                sql, (query.astype(np.float32).tobytes(), STAGE_K, agent_id, STAGE_CHANNEL)
            ).fetchall()
            timings.append((time.perf_counter() - started) * 1000)
        exact.close()
        return timings
    engine = _engine(url)
    sql = text(
        "SELECT record_id, (embedding <=> CAST(:v AS vector(256))) + 0 AS d FROM memory_vectors_256 "
        "WHERE agent_id = :a AND channel = :c ORDER BY d LIMIT :k"
    )
    try:
        with engine.connect() as connection:
            for query in queries:
                literal = "[" + ",".join(repr(float(x)) for x in query) + "]"
                params = {"v": literal, "a": agent_id, "c": STAGE_CHANNEL, "k": STAGE_K}
                started = time.perf_counter()
                connection.execute(sql, params).all()
                timings.append((time.perf_counter() - started) * 1000)
    finally:
        engine.dispose()
    return timings


def _store_mb(url: str) -> float:
    if url.startswith("sqlite"):
        return _size_mb(Path(make_url(url).database or ""))
    return _pg_size_mb(url)


async def _stage_row(backend: Backend, count: int, query_count: int) -> str:
    vectors, queries = _cached_vectors(count, 200)
    queries = queries[:query_count]
    url, rate = await _stage_store(backend, count, vectors)
    agent_id = _stage_agent(count)
    before = _time_exact(url, count, queries[:EXACT_TIMED])  # exact search at 1M: ~0.5 s a query
    # The truth: brute force in numpy over the same float32 unit vectors (the exact search's
    # answer, but for exact ties).
    ids = _stage_ids(count)
    truths: list[set[str]] = []
    for query in queries:
        scores = np.concatenate(
            [np.asarray(vectors[i : i + 100_000]) @ query for i in range(0, count, 100_000)]
        )
        truths.append({ids[i] for i in np.argpartition(-scores, 10)[:10]})
    store = open_store(url)
    await store.setup()
    after: list[float] = []
    cpu: list[float] = []
    recall: list[float] = []
    try:
        await store.vector_candidates(
            agent_id, queries[0].tolist(), STAGE_K, [STAGE_CHANNEL]
        )  # loads the codes (SQLite) or warms the index's pages (PostgreSQL)
        for query, truth in zip(queries, truths, strict=True):
            started, cpu_started = time.perf_counter(), time.process_time()
            hits = await store.vector_candidates(agent_id, query.tolist(), STAGE_K, [STAGE_CHANNEL])
            after.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - cpu_started) * 1000)
            recall.append(len({hit[0] for hit in hits[:10]} & truth) / 10)
    finally:
        await store.close()
    load = os.getloadavg()[0]
    return (
        f"{count:>9,} {query_count:>7} {_store_mb(url):>8.0f} {rate:>8.0f} "
        f"{statistics.median(before):>8.1f} {_percentile(before, 0.95):>8.1f} "
        f"{statistics.median(after):>8.1f} {_percentile(after, 0.95):>8.1f} {statistics.median(cpu):>7.1f} "
        f"{statistics.mean(recall):>9.3f} {load:>5.1f}"
    )


async def run_stage(backend: Backend, sizes: Sequence[int], query_count: int) -> None:
    print(
        f"{backend.name} vector stage, one agent, ONE channel, 256 dims, k={STAGE_K}; cache {_cache_dir()}\n"
    )
    header = (
        f"{'records':>9} {'queries':>7} {'db MB':>8} {'insert/s':>8} {'exact50':>8} {'exact95':>8} "
        f"{'index50':>8} {'index95':>8} {'cpu50':>7} {'recall@10':>9} {'load':>5}"
    )
    print(header + "   (latencies in ms; cpu50: this process's CPU ms per indexed search)", flush=True)
    for count in sizes:
        print(await _stage_row(backend, count, query_count), flush=True)


# the keyword stage in one compartment ---------------------------------------------------------
class _KeywordPlans(SQLiteStore):
    """The real store, with the compartment-filter plan (the only plan before stop 27)
    runnable on its own beside `keyword_candidates`."""

    async def by_filter(self, agent_id: str, query: str, k: int, channels: list[str]) -> Any:
        match = fts_any_query(query)
        return await self._read(
            "filter plan", lambda c: keyword_by_filter(c, agent_id, match or "", k, channels)
        )

    async def proven_by_top(self, agent_id: str, query: str, k: int, channels: list[str]) -> bool:
        match = fts_any_query(query)
        found = await self._read("top plan", lambda c: keyword_by_top(c, agent_id, match or "", k, channels))
        return found is not None


async def _keyword_row(size: int, query_count: int) -> list[str]:
    """Times `Store.keyword_candidates` (k=100) against the filter plan alone, on the same
    records as full recall in ONE channel but with no vectors (cached: fills in a minute)."""
    path = _cache_dir() / f"keyword-{size}-{SEED}.db"
    agent_id = derived_id(START, "scale-agent", str(size))
    records = _records(agent_id, size, 1)
    queries = [q for q in (analyse_query(q, NOW).keyword_query for q in _queries(records, query_count)) if q]
    store = _KeywordPlans(path)
    await store.setup()
    try:
        if not path.with_suffix(".done").exists():
            await store.ensure_agent(agent_id, "scale", START)
            for offset in range(0, size, 8192):
                await store.add_records(records[offset : offset + 8192], None, None)
            path.with_suffix(".done").write_text("ok")
        del records
        channels = [CHANNELS[-1]]
        proven = sum([await store.proven_by_top(agent_id, q, STAGE_K, channels) for q in queries])
        plans = {
            "filter": lambda q: store.by_filter(agent_id, q, STAGE_K, channels),
            "store": lambda q: store.keyword_candidates(agent_id, q, STAGE_K, channels),
        }
        rows: list[str] = []
        for name, search in plans.items():
            await search(queries[0])
            wall: list[float] = []
            cpu: list[float] = []
            for query in queries:
                started, cpu_started = time.perf_counter(), time.process_time()
                await search(query)
                wall.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - cpu_started) * 1000)
            rows.append(
                f"{size:>9,} {name:>7} {statistics.median(wall):>8.1f} {_percentile(wall, 0.95):>8.1f} "
                f"{statistics.median(cpu):>7.1f} {proven:>4}/{len(queries):<4} {os.getloadavg()[0]:>5.1f}"
            )
        return rows
    finally:
        await store.close()


async def run_keyword(sizes: Sequence[int], query_count: int) -> None:
    print(f"sqlite keyword stage, one agent, ONE channel, k={STAGE_K}; cache {_cache_dir()}")
    print(f"{'records':>9} {'plan':>7} {'p50':>8} {'p95':>8} {'cpu50':>7} {'proven':>9} {'load':>5}")
    for size in sizes:
        for row in await _keyword_row(size, query_count):
            print(row, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated record counts")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 records")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="fill the full-recall stores anew instead of reusing those kept in the cache directory",
    )
    parser.add_argument(
        "--channels",
        type=int,
        default=len(CHANNELS),
        help="channels the records spread over (1: every record in the channel recall runs in)",
    )
    parser.add_argument("--queries", type=int, default=200, help="recall queries per mode")
    parser.add_argument(
        "--million-queries", type=int, default=50, help="recall queries per mode at 1,000,000 records"
    )
    parser.add_argument(
        "--dims", type=int, default=0, help="[memory] embedder_dims (WordLlama: 64, 128, 256)"
    )
    parser.add_argument(
        "--vector-stage",
        action="store_true",
        help="measure the vector stage alone in one compartment (synthetic clustered vectors)",
    )
    parser.add_argument("--stage-sizes", default="10000,100000,1000000", help="with --vector-stage")
    parser.add_argument(
        "--keyword-stage",
        action="store_true",
        help="measure keyword search alone in one compartment (--stage-sizes; no vectors)",
    )
    parser.add_argument(
        "--store",
        default="sqlite",
        help="sqlite (default), postgresql (a pgserver started here, data kept in the cache "
        "directory) or a postgresql:// URL (each store in a schema of its own)",
    )
    args = parser.parse_args()
    sizes = [(int(s), args.queries) for s in args.sizes.split(",") if s]
    if args.million:
        sizes.append((1_000_000, args.million_queries))
    if not 1 <= args.channels <= len(CHANNELS):
        parser.error(f"--channels must be 1..{len(CHANNELS)}")
    backend = Backend.from_argument(args.store)
    try:
        if args.keyword_stage:
            stage_sizes = [int(s) for s in args.stage_sizes.split(",") if s]
            asyncio.run(run_keyword(stage_sizes, min(args.queries, 200)))
        elif args.vector_stage:
            stage_sizes = [int(s) for s in args.stage_sizes.split(",") if s]
            asyncio.run(run_stage(backend, stage_sizes, min(args.queries, 200)))
        else:
            asyncio.run(run(backend, sizes, args.dims, args.channels, fresh=args.fresh))
    finally:
        backend.stop()


if __name__ == "__main__":
    main()
