"""Recall on LoCoMo (Maharana et al., ACL 2024) through the agent's own import and retrieval.

For each conversation of a LoCoMo-format file, imports — through `persyn memory import`'s
code path (`import_jsonl`), into a fresh embedded store — (a) every observation as one
record (ref `<sample_id>:<dia_id>`, time = its session's date, participants = both
speakers, channel = the sample id) and, into a second agent, (b) every session summary as
one record, and into a third (c) every dialog turn as the raw record ("Speaker: text", ref
`<sample_id>:<dia_id>#turn`), what the agent's dialog search reads, and (d) observations and
turns together in one agent (one ranking over both); `"<memories> | turns"` stores the turns
as dialog messages and recalls through the agent's own path (`recollect`). Then asks every category 1–4 question through `Retriever.retrieve` with the
default `[memory]` configuration, on the conversation's channel, with both speakers
present, "now" = the day after the last session, and reports per granularity:

- recall_all@k — every evidence session is among the sessions of the top k records;
- recall_any@5 — at least one is;
- the same for keyword-only and vector-only retrieval from the same store;
- retrieval latency p50/p99 (query embedding + store searches + scoring), milliseconds.

Ranking only is measured: the token budget is set out of the way and `limit` = 10.
Observations that share a dialog turn get refs `<sample_id>:<dia_id>#2`, `#3`… (a ref is
unique per agent). Questions whose evidence names no session are skipped and counted.

    uv run python bench/locomo.py [PATH] [--embedder wordllama|minilm] [--conversations N]
        [--granularity G] [--mode hybrid|keyword|vector]

G: observations, "session summaries", turns, "observations + turns" (one ranking),
"observations | turns" (two rankings merged by score), "summary sentences",
"observations keyed by turn", "session summaries keyed by dialog", "observations keyed by
turn | turns", "session summaries | turns", "session summaries keyed by dialog | turns".

Also prints all@5 per question category (multi-hop, temporal, open-domain, single-hop) for the
first mode, so a gain that fits one category only is visible.

PATH defaults to ../shared/bench/locomo_dev.json beside the repository. The data is
CC BY-NC 4.0: read in place, never copied into the repository.

What the retrieval design rests on (recall_all@5, observations / session summaries, on this
dev split, WordLlama 256-d; first block from a numpy + FTS5 prototype, second from this
script with one setting changed at a time from the defaults):

    BM25, every query word ORed                         0.700 / 0.653
    BM25, stop words dropped                            0.721 / 0.691   kept
    dense, whole question                               0.687 / 0.542
    dense, stop words dropped from the query            0.692 / 0.568   kept
    RRF (k=60 / k=10), pools of 50                      0.716 / 0.654   0.732 / 0.674
    weighted sum, BM25 / best, cosine (alpha 0.5)       0.742 / 0.713   kept
    ... + pseudo-relevance feedback on the query vector 0.725 / 0.704
    ... + MMR diversity (lambda 0.8-0.95)               +0.000..0.006 (noise)
    ... BM25 saturated s/(s+k) instead of s/best        0.720 / 0.709
    ... + date match for dates named in the query       0.758 / 0.725   kept
    ... + BM25 scaled by the best match's coverage      0.763 / 0.722   kept (absolute anchor)

    recency weight 0.15 / 0.05 / 0 (half-life 30 d)     0.754 / 0.712   0.757 / 0.714   0.763 / 0.709
    date weight 0 / 0.3 / 0.5                           0.732 / 0.699   0.757 / 0.714   0.757 / 0.714
    keyword weight 0.7 / 1.0 / 1.2                      0.746 / 0.699   0.757 / 0.714   0.764 / 0.717
    candidate pool 50 / 100 / 200                       no change
    similarity window 0.2-0.6 / 0.1-0.7 / 0.0-0.8       0.753 / 0.707   0.757 / 0.714   0.766 / 0.718
    WordLlama truncated to 128-d / 64-d                 0.751 / 0.711   0.747 / 0.717

Issue 39 (2026-12-07, shared 2-core VM, 1-minute load 2-15 from other jobs: latencies and
import times below are inflated and only comparable within a run; CPU figures are this
process's). recall_all@5, observations / summaries, hybrid, then observations per question
category: multi-hop (142 questions) / temporal (156) / open-domain (44) / single-hop (418):

    WordLlama, before (episode_penalty 1)               0.759 / 0.714   0.289 / 0.872 / 0.477 / 0.907
    ... + spread over episodes, penalty 0.9             0.775 / -       0.310 / 0.897 / 0.477 / 0.919
    ... penalty 0.8 (kept: the default)                 0.776 / 0.714   0.310 / 0.897 / 0.500 / 0.919
    ... penalty 0.65                                    0.779 / -       0.317 / 0.897 / 0.523 / 0.919
    MiniLM int8 ONNX, content words embedded (pen. 1)   0.762 / 0.717   0.303 / 0.897 / 0.523 / 0.892
    MiniLM, whole question embedded (pen. 1)            0.770 / 0.717   0.317 / 0.910 / 0.500 / 0.900
    MiniLM, content words, penalty 0.8                  0.784 / 0.717   0.345 / 0.910 / 0.545 / 0.911
    MiniLM, whole question, penalty 0.8 (its setting)   0.787 / 0.717   0.359 / 0.910 / 0.545 / 0.911
    ... + similarity weight 1.5                         0.791 / -       0.387 / 0.917 / 0.568 / 0.904
    ... similarity window 0.2-0.8                       0.789 / -       0.352 / 0.910 / 0.545 / 0.919
    ... similarity window 0.0-0.6                       0.788 / -       0.338 / 0.897 / 0.545 / 0.926

    vector-only, WordLlama / MiniLM content / MiniLM whole question:
        observations 0.714 / 0.717 / 0.691, summaries 0.621 / 0.589 / 0.613
    with penalty 0.8 (WordLlama): hybrid / keyword / vector 0.776 / 0.767 / 0.738 and
        0.714 / 0.718 / 0.621; all@10 observations 0.817 -> 0.850

Raw dialog as a third source (`--granularity turns`, 2760 turns, WordLlama, penalty 0.8):
hybrid / keyword / vector 0.775 / 0.787 / 0.728; by category 0.261 / 0.910 / 0.432 / 0.935.
The raw record finds single-hop details as well as the observations do (keyword-only best:
a turn is short and says the detail in the speaker's words). Observations and turns in one
ranking (`--granularity "observations + turns"`, 3970 records): hybrid / keyword / vector
0.801 / 0.804 / 0.764, by category 0.324 / 0.923 / 0.477 / 0.952, all@10 0.871: the raw
record recovers details the observations dropped. The agent's recall does not yet fuse its
dialog search with its memories (SPEC §4.2 "check the raw record"): the next step, measured
here as its upper bound with one shared ranking.

Two sources ranked apart and merged (`--granularity "observations | turns"`, the shape the
agent's recall would have: its memory ranking and a raw-dialog ranking, each by the same
scorer, merged by score and spread over episodes, top 10): 0.799, by category 0.310 / 0.917 /
0.523 / 0.950, all@10 0.876: as good as one shared ranking (0.801). Fused only when the
memories are weak (their best score under 0.55 / 0.45): 0.791 / 0.786, so fusing always is
the better rule. Multi-hop does not move with the raw record: its evidence is spread over
sessions, not missing from them.

Index keys richer than the text (issue 39 item 3; the record's text is unchanged and
embedded alone, the keys are its tags, which the keyword index reads with the summary):

    observations, each with its dialog turn's content words as keys (up to 32;
    `--granularity "observations keyed by turn"`)      0.792 (+0.016)   0.345 / 0.910 / 0.523 / 0.928
                                                        keyword 0.774, vector 0.738
    session summaries (0.726 in the same run: 0.246 / 0.840 / 0.500 / 0.871), each with
    up to 32 of its session's most said words the summary lacks, as consolidation could
    take them from the transcript it summarises (`"session summaries keyed by dialog"`)
                                                        0.753 (+0.027)   0.261 / 0.872 / 0.455 / 0.907
    ... up to 16 words                                  0.734

Both gain without a record or a vector more, and the query path is unchanged (p50 as
before). Not yet in the agent: consolidation's tags are labels the model and the operator
read (up to 8, shown by `search_memory`); the keys want a column of their own that the
full-text index reads and no prompt shows.

The two together, and the summaries with the raw record (two rankings merged by score,
top 10, spread over days with penalty 0.8; 0.6 and 0.4 give 0.808 on the first line):

    observations keyed by turn | turns                  0.807   0.324 / 0.923 / 0.523 / 0.957
    session summaries | turns                           0.800   0.331 / 0.923 / 0.455 / 0.950
    session summaries keyed by dialog | turns           0.795   0.324 / 0.904 / 0.455 / 0.950

So the raw record fused into recall would carry summaries past their target (0.77);
observations stop at 0.81 (target 0.82), held back by multi-hop (0.32).

The agent's real path (issue 39, round 4): `"<memories> | turns"` now stores every turn as a
message of its session's conversation and recalls through `memory.dialog_recall.recollect`,
what a turn and `persyn memory recall` run: memories by `Retriever.retrieve`, the raw dialog
by `DialogRecall.rank` (`rank_messages`: any content word, FTS5 bm25, the top
`dialog_candidates`; no vectors for messages, so the hits are embedded at query time and
scored with the memories' scorer), merged by score and spread over episodes. Defaults:

    observations | turns, message text alone           0.795   0.296 / 0.917 / 0.477 / 0.952
    session summaries | turns, message text alone      0.771   0.232 / 0.865 / 0.523 / 0.945
    ... dialog_candidates 50 / 100                      0.796 / 0.797 and 0.771 / 0.771 (p50 x4-5)
    the hit read as "Speaker: text" for its similarity and keyword coverage (kept):
    observations | turns                                0.800   0.296 / 0.917 / 0.523 / 0.957
    session summaries | turns                           0.786   0.282 / 0.885 / 0.477 / 0.952

Summaries pass their target (0.77) with `persyn init`'s defaults; observations (0.82) do not.
The bench-only figures above (0.799 / 0.800) had a vector per turn, so the raw record's
candidates came from the vector index too; the agent's dialog has no vectors.
Cost of a turn (`bench/instructions.py --turns 3 --memories 500 --modes deferred`, callgrind):
351.6M instructions per turn before, 352.1M with the dialog search on (+0.15%, ~0.05 ms CPU):
the extra query, its hits' sensitivity read and one batch embedding of at most 20 messages.

Round 5 (issue 39; the agent's path, `"<memories> | turns"`, hybrid, all@5 then by category
multi-hop / temporal / open-domain / single-hop; load 7-14 from other jobs):

    defaults before (episode_penalty 0.8)               0.800 / 0.786   0.296 / 0.917 / 0.523 / 0.957
    episode_penalty 0.6 (kept: the default)             0.804 / 0.793   0.310 / 0.917 / 0.545 / 0.957
    ... 0.4 / 0.2                                       0.805 / 0.795 both (0.310 / 0.923 / 0.545 / 0.957)
    summaries by category, 0.8 -> 0.6                   0.282 / 0.885 / 0.477 / 0.952 -> 0.296 / 0.891 / 0.523 / 0.955
    second hop, model-free: the 4 content words most shared by the first ranking's top 3
    that the question and the speakers' names lack, appended to the question, recalled
    again, the two rankings fused by RRF (k 10, second weighted 0.5), then spread
                                                        0.803           0.331 / 0.936 / 0.500 / 0.945
    ... 8 words                                         0.797           0.331 / 0.917 / 0.432 / 0.950
    ... RRF k 60, equal weights                         0.792           0.331 / 0.923 / 0.455 / 0.935
    ... the first ranking's top 2 kept in place         0.800 / 0.801   0.317-0.338, single-hop 0.947
    ... only when the ranking is flat (top - 5th < 0.05) 0.799          0.331 / 0.929 / 0.477 / 0.943

Not kept: the second hop buys multi-hop (+0.035) and temporal what it costs single-hop and
open-domain (a hit's words pull in its neighbours' topic, not the question's); it also doubles
the searches of a recall. Multi-hop's ceiling under this ranking: with one record per session
(penalty 1, sessions deduplicated, top 60), all of a question's evidence sessions are among
the first 5 sessions for 44 of 142 (0.31), the first 10 for 75 (0.53); 9 have one outside the
60. Reading the misses, the ranking is rarely wrong about the topic: "Where has Melanie camped?"
has its evidence in sessions 4, 6, 8, while sessions 9, 18, 16, 2 and 10 say as much about her
camping and rank above them; that is the labels' choice among equal sessions, which no reorder
reaches. Index keys as a column (migration 27) were not built: the measured gain was bench-only
with a vector per turn (0.807 against 0.799), and with the raw dialog already merged the keys
repeat what the dialog search finds ("session summaries keyed by dialog | turns" 0.795 against
0.800 without keys); the agent's consolidation would have to write them for summaries, the one
place the agent forms memories itself.

Tried and not kept (issue 39, same conditions, observations, hybrid):

    multi-aspect query: a coordination of words ("Caroline and Melanie", "hiking, camping
    or swimming") split into one query per word, each aspect's best moved up after the
    whole question's best                               0.776 (no change; 17 of 142
                                                        multi-hop questions coordinate)
    ... and clauses split on , ; and / or too           0.774 / 0.310 / 0.891 / 0.500 / 0.916
    summaries: one record (vector + BM25 document) per sentence, a session counted at its
    best sentence (`--granularity "summary sentences"`) 0.693 / 0.225 / 0.808 / 0.432 / 0.837
                                                        against 0.714 whole: a sentence
                                                        loses its subject ("She ...")

Spreading over episodes (a channel's day) lifts single-hop most: a wrong session's several
observations no longer fill the top five. Summaries are one a session, so it cannot move
them. MiniLM is kept as an option, not the default: +0.011 on observations, nothing on
summaries (long texts, one vector each), for ~7 ms of CPU per query (WordLlama 0.17 ms;
200 LoCoMo questions, `time.process_time`) and ~8 ms per record imported (WordLlama ~0.1),
so 10k records cost ~80 s of one core's CPU; a run's import of the 1210 observations took
33-56 s under load 7-15, against 4-14 s with WordLlama. Neither target (0.82 / 0.77) is met.
Multi-hop questions ("what books has Melanie read?") remain the gap: their evidence is in
two to nine sessions, and the top five rarely hold them all.

Defaults: equal similarity and keyword weights (1.2 gained 0.007 but let a keyword-only
match reach "strong"), recency 0.05 (a tie-breaker: LoCoMo asks about every session
alike), date 0.3, similarity window 0.1-0.7 (where unrelated and paraphrased text fall
with WordLlama), pools of 100.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from persyn.core.config import AgentConfig, MemoryConfig
from persyn.core.ids import derived_id
from persyn.core.records import ScoredRecord
from persyn.memory._query import content_words
from persyn.memory.dialog_recall import DialogRecall, recollect
from persyn.memory.embedder import Embedder, embedder_from_config
from persyn.memory.importer import import_channel_key, import_jsonl
from persyn.memory.retrieval import Mode, Retriever
from persyn.store.base import Identity, Message, Role
from persyn.store.capabilities import FullStore
from persyn.store.sqlite.store import SQLiteStore

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo_dev.json"
KS = (1, 3, 5, 10)
MODES: tuple[Mode, ...] = ("hybrid", "keyword", "vector")
GRANULARITIES = (
    "observations",
    "session summaries",
    "turns",
    "observations + turns",
    "summary sentences",
    "observations | turns",
    "observations keyed by turn",
    "session summaries keyed by dialog",
    "observations keyed by turn | turns",
    "session summaries | turns",
    "session summaries keyed by dialog | turns",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@dataclass
class Question:
    text: str
    sessions: frozenset[int]
    category: int


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    dates: dict[int, datetime]
    observations: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    summaries: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    summary_sentences: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    turns: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    questions: list[Question] = field(default_factory=list[Question])
    skipped: int = 0

    @property
    def channel(self) -> str:
        return import_channel_key(self.sample_id)

    @property
    def now(self) -> datetime:
        return max(self.dates.values()) + timedelta(days=1)


def _session_date(raw: str) -> datetime:
    return datetime.strptime(raw, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _evidence_sessions(evidence: Sequence[str]) -> frozenset[int]:
    # Evidence ids are "D<session>:<turn>", with the odd "D8:6; D9:17" or "D:11:26".
    return frozenset(int(m) for item in evidence for m in re.findall(r"D:?(\d+):\d+", item))


def load(path: Path) -> list[Conversation]:
    conversations: list[Conversation] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        talk = sample["conversation"]
        dates = {
            int(key.split("_")[1]): _session_date(value)
            for key, value in talk.items()
            if key.endswith("_date_time")
        }
        conversation = Conversation(sample["sample_id"], (talk["speaker_a"], talk["speaker_b"]), dates)
        refs: dict[str, int] = {}
        for key, by_speaker in sample["observation"].items():
            session = int(key.split("_")[1])
            for items in by_speaker.values():
                for text, dia_id in items:
                    turn = dia_id if isinstance(dia_id, str) else str(dia_id[0])
                    ref = f"{conversation.sample_id}:{turn}"
                    refs[ref] = refs.get(ref, 0) + 1
                    if refs[ref] > 1:
                        ref = f"{ref}#{refs[ref]}"
                    conversation.observations.append(_line(conversation, session, text, ref))
        for key, value in talk.items():
            if key.startswith("session_") and not key.endswith("_date_time") and isinstance(value, list):
                session = int(key.split("_")[1])
                for turn in cast(list[dict[str, Any]], value):
                    # The raw record: what was said, by whom, as the agent's dialog keeps it.
                    said = f"{turn['speaker']}: {turn['text']}"
                    ref = f"{conversation.sample_id}:{turn['dia_id']}#turn"
                    conversation.turns.append(_line(conversation, session, said, ref))
        for key, text in sample["session_summary"].items():
            session = int(key.split("_")[1])
            ref = f"{conversation.sample_id}:session_{session}"
            conversation.summaries.append(_line(conversation, session, text, ref))
            for index, sentence in enumerate(_SENTENCE_END.split(text.strip()), 1):
                # One record (so one vector and one BM25 document) per sentence of the summary.
                line = _line(conversation, session, sentence, f"{ref}#{index}")
                conversation.summary_sentences.append(line)
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            sessions = _evidence_sessions(qa.get("evidence", []))
            if sessions:
                conversation.questions.append(Question(qa["question"], sessions, qa["category"]))
            else:
                conversation.skipped += 1
        conversations.append(conversation)
    return conversations


def _keyed_by_turn(conversation: Conversation) -> list[dict[str, Any]]:
    """Each observation with its dialog turn's content words as extra index keys (tags)."""
    said = {line["ref"].removesuffix("#turn"): line["summary"] for line in conversation.turns}
    keyed: list[dict[str, Any]] = []
    for line in conversation.observations:
        turn = said.get(line["ref"].split("#")[0], "")
        keys = [w for w in content_words(turn.partition(": ")[2]) if len(w) <= 100][:32]
        keyed.append({**line, "tags": keys})
    return keyed


def _keyed_by_dialog(conversation: Conversation) -> list[dict[str, Any]]:
    """Each session summary with up to 32 of its session's dialog words (most said first, not
    already in the summary) as extra index keys: what consolidation could add from the
    transcript it summarises, knowing nothing of other sessions."""
    keyed: list[dict[str, Any]] = []
    for line in conversation.summaries:
        session = line["ref"].rsplit("_", 1)[1]
        prefix = f"{conversation.sample_id}:D{session}:"
        counts: dict[str, int] = {}
        for turn in conversation.turns:
            if turn["ref"].startswith(prefix):
                for word in content_words(turn["summary"].partition(": ")[2]):
                    counts[word] = counts.get(word, 0) + 1
        known = set(content_words(line["summary"]))
        ranked = sorted((w for w in counts if w not in known and len(w) > 2), key=lambda w: -counts[w])
        keyed.append({**line, "tags": ranked[:32]})
    return keyed


def _line(conversation: Conversation, session: int, text: str, ref: str) -> dict[str, Any]:
    return {
        "time": conversation.dates[session].isoformat(),
        "channel": conversation.sample_id,
        "participants": list(conversation.speakers),
        "summary": text,
        "ref": ref,
    }


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass
class Scores:
    hits: dict[str, int] = field(default_factory=dict[str, int])
    questions: int = 0
    latencies_ms: list[float] = field(default_factory=list[float])
    by_category: dict[int, list[int]] = field(default_factory=dict[int, list[int]])  # [hits@5, questions]

    def add(self, ranked_sessions: Sequence[int], gold: frozenset[int], category: int) -> None:
        self.questions += 1
        for k in KS:
            key = f"all@{k}"
            self.hits[key] = self.hits.get(key, 0) + (gold <= set(ranked_sessions[:k]))
        self.hits["any@5"] = self.hits.get("any@5", 0) + bool(gold & set(ranked_sessions[:5]))
        tally = self.by_category.setdefault(category, [0, 0])
        tally[0] += gold <= set(ranked_sessions[:5])
        tally[1] += 1

    def rate(self, key: str) -> float:
        return self.hits.get(key, 0) / max(1, self.questions)

    def category_rates(self) -> str:
        return "  ".join(
            f"{CATEGORIES[c]} {hits / max(1, n):.3f} ({n})"
            for c, (hits, n) in sorted(self.by_category.items())
        )


async def _import(
    store: FullStore,
    embedder: Embedder | None,
    conversations: Sequence[Conversation],
    granularity: str,
    tmp: Path,
) -> tuple[AgentConfig, dict[str, dict[str, str]], float]:
    # A fixed agent id makes record ids (derived from it) and so every tie-break repeatable.
    agent_id = derived_id(datetime(2024, 1, 1, tzinfo=UTC), "locomo", granularity)
    agent = AgentConfig(name=f"bench-{'-'.join(granularity.replace('+', ' ').split())}", id=agent_id)
    await store.ensure_agent(agent.id, agent.name, datetime.now(UTC))
    people: dict[str, dict[str, str]] = {}

    async def resolve(name: str, channel: str, seen_at: datetime) -> str:
        # Deterministic: one person per (conversation, speaker name).
        identity = Identity(service="import", channel=channel, speaker_id=name.lower())
        person = await store.resolve_person(agent.id, identity, name, "human", datetime.now(UTC))
        people.setdefault(channel, {})[name] = person.id
        return person.id

    started = time.perf_counter()
    for conversation in conversations:
        lines = {
            "observations": conversation.observations,
            "session summaries": conversation.summaries,
            "turns": conversation.turns,
            "observations + turns": conversation.observations + conversation.turns,
            "summary sentences": conversation.summary_sentences,
            "observations keyed by turn": _keyed_by_turn(conversation),
            "session summaries keyed by dialog": _keyed_by_dialog(conversation),
        }[granularity]
        path = tmp / f"{agent.name}-{conversation.sample_id}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        report = await import_jsonl(path, store, embedder, agent, resolve)
        if report.problems or report.imported != len(lines):
            raise SystemExit(f"import of {path.name} went wrong: {report}")
    return agent, people, time.perf_counter() - started


async def _evaluate(
    store: FullStore,
    embedder: Embedder | None,
    config: MemoryConfig,
    agent: AgentConfig,
    people: dict[str, dict[str, str]],
    conversations: Sequence[Conversation],
    modes: Sequence[Mode] = MODES,
    *,
    collapse: bool = False,
) -> dict[Mode, Scores]:
    retriever = Retriever(store, embedder, config)
    results: dict[Mode, Scores] = {mode: Scores() for mode in modes}
    for conversation in conversations:
        present = [people[conversation.channel][name] for name in conversation.speakers]
        for question in conversation.questions:
            for mode in modes:
                started = time.perf_counter()
                result = await retriever.retrieve(
                    agent.id,
                    question.text,
                    channel=conversation.channel,
                    participants=present,
                    now=conversation.now,
                    budget_tokens=1_000_000,
                    limit=max(KS) * (5 if collapse else 1),
                    mode=mode,
                )
                results[mode].latencies_ms.append((time.perf_counter() - started) * 1000)
                if result.degraded:
                    raise SystemExit(f"retrieval degraded: {result.degraded}")
                sessions = [_session_of(s.record.ref) for s in result.records]
                if collapse:  # a session's record scores as its best sentence
                    sessions = list(dict.fromkeys(sessions))
                results[mode].add(sessions, question.sessions, question.category)
    return results


def _report(
    granularity: str,
    results: dict[Mode, Scores],
    modes: Sequence[Mode],
    rows: list[str],
    per_category: list[str],
) -> None:
    per_category.append(f"{granularity:<18} {results[modes[0]].category_rates()}")
    for mode in modes:
        scores = results[mode]
        row = f"{granularity:<18} {mode:<8} " + " ".join(f"{scores.rate(f'all@{k}'):>7.3f}" for k in KS)
        row += f" {scores.rate('any@5'):>7.3f}"
        row += f" {statistics.median(scores.latencies_ms):>7.2f}"
        row += f" {_percentile(scores.latencies_ms, 0.99):>7.2f}"
        rows.append(row)


async def _fused_sources(
    store: FullStore,
    embedder: Embedder | None,
    config: MemoryConfig,
    conversations: Sequence[Conversation],
    tmp: Path,
    modes: Sequence[Mode],
    memory_side: str = "observations",
) -> dict[Mode, Scores]:
    """Memories and the raw dialog through the agent's own recall (`recollect`): the memory
    side imported as records, every turn stored as a message of its session's conversation
    (one conversation per session, on the memory side's channel, both speakers taking part,
    closed after it), the way the agent keeps its dialog; the raw dialog ranked by
    `DialogRecall` (`rank_messages`) and merged with the memories by score."""
    agent, people, _ = await _import(store, embedder, conversations, memory_side, tmp)
    await _store_dialog(store, agent, people, conversations)
    retriever = Retriever(store, embedder, config)
    dialog = DialogRecall(store, store, embedder, config)
    results: dict[Mode, Scores] = {mode: Scores() for mode in modes}
    for conversation in conversations:
        present = [people[conversation.channel][name] for name in conversation.speakers]
        for question in conversation.questions:
            for mode in modes:
                started = time.perf_counter()
                found = await recollect(
                    retriever,
                    dialog,
                    agent.id,
                    question.text,
                    channel=conversation.channel,
                    participants=present,
                    now=conversation.now,
                    budget_tokens=1_000_000,
                    limit=max(KS),
                    mode=mode,
                )
                results[mode].latencies_ms.append((time.perf_counter() - started) * 1000)
                sessions = [
                    _session_of(item.record.ref) if isinstance(item, ScoredRecord) else said[item.message.id]
                    for item in found.ranked
                ]
                results[mode].add(sessions, question.sessions, question.category)
    return results


said: dict[str, int] = {}  # message id -> LoCoMo session


async def _store_dialog(
    store: FullStore,
    agent: AgentConfig,
    people: dict[str, dict[str, str]],
    conversations: Sequence[Conversation],
) -> None:
    for conversation in conversations:
        service, channel = conversation.channel.split(":", 1)
        speakers = people[conversation.channel]
        sessions: dict[int, list[dict[str, Any]]] = {}
        for line in conversation.turns:
            sessions.setdefault(_session_of(line["ref"]), []).append(line)
        for session, lines in sorted(sessions.items()):
            start = conversation.dates[session]
            opened = await store.open_conversation(
                agent.id, service, channel, list(speakers.values()), start, 3600.0
            )
            for index, line in enumerate(lines):
                at = start + timedelta(seconds=index)
                name, _, text = line["summary"].partition(": ")
                message = Message(
                    id=derived_id(at, agent.id, line["ref"]),
                    agent_id=agent.id,
                    conversation_id=opened.id,
                    role=Role.USER,
                    person_id=speakers[name],
                    speaker_name=name,
                    text=text,
                    created_at=at,
                    event_id=None,
                )
                await store.add_message(message)
                said[message.id] = session
            await store.close_conversation(agent.id, opened.id, start + timedelta(seconds=len(lines)))


def _session_of(ref: str | None) -> int:
    # "<sample>:D3:14", "<sample>:D3:14#2" or "<sample>:session_3"
    tail = (ref or "").split(":", 1)[-1]
    found = re.match(r"(?:D|session_)(\d+)", tail)
    return int(found.group(1)) if found else -1


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run(
    path: Path,
    embedder_spec: str | None,
    limit: int | None,
    granularities: Sequence[str] = GRANULARITIES,
    modes: Sequence[Mode] = MODES,
    overrides: Sequence[tuple[str, str]] = (),
) -> None:
    conversations = load(path)[:limit]
    settings: dict[str, Any] = {key: json.loads(value) for key, value in overrides}  # values as JSON
    if embedder_spec is not None:
        settings["embedder"] = embedder_spec
    config = MemoryConfig.model_validate(settings)
    embedder = embedder_from_config(config)
    await embedder.embed(["warm up"])  # load the model outside the timings
    questions = sum(len(c.questions) for c in conversations)
    skipped = sum(c.skipped for c in conversations)
    print(
        f"LoCoMo {path.name}: {len(conversations)} conversations, {questions} questions (categories 1-4)"
        + (f", {skipped} skipped (no session in evidence)" if skipped else "")
    )
    print(f"encoder {embedder.name}; default [memory] configuration; 'now' = day after the last session\n")
    header = f"{'granularity':<18} {'retrieval':<8} " + " ".join(f"{'all@' + str(k):>7}" for k in KS)
    header += f" {'any@5':>7} {'p50 ms':>7} {'p99 ms':>7}"
    rows: list[str] = []
    per_category: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, granularity in enumerate(granularities):
            # A store of its own per granularity: "observations" and "observations | turns" import
            # the same records into the same (fixed) agent id, which one store would hold twice.
            store = SQLiteStore(Path(tmp) / f"locomo-{index}.db")
            await store.setup()
            try:
                if granularity.endswith(" | turns"):
                    memory_side = granularity.removesuffix(" | turns")
                    fused = await _fused_sources(
                        store, embedder, config, conversations, Path(tmp), modes, memory_side
                    )
                    _report(granularity, fused, modes, rows, per_category)
                    continue
                agent, people, seconds = await _import(store, embedder, conversations, granularity, Path(tmp))
                records = await store.count_records(agent.id)
                print(f"imported {records} {granularity} in {seconds:.1f} s")
                results = await _evaluate(
                    store,
                    embedder,
                    config,
                    agent,
                    people,
                    conversations,
                    modes,
                    collapse=granularity == "summary sentences",
                )
                _report(granularity, results, modes, rows, per_category)
            finally:
                await store.close()
    print()
    print(header)
    for row in rows:
        print(row)
    print(f"\nall@5 by question category ({modes[0]}; questions in brackets)")
    for row in per_category:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH, help="a LoCoMo-format JSON file")
    parser.add_argument(
        "--embedder", default=None, help="[memory] embedder string (default: the configured default)"
    )
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument(
        "--granularity",
        choices=GRANULARITIES,
        action="append",
        help="only this one (repeatable; default both)",
    )
    parser.add_argument(
        "--mode", choices=MODES, action="append", help="only this retrieval (repeatable; default all three)"
    )
    parser.add_argument(
        "--memory",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [memory] setting other than its default, e.g. dialog_candidates=50 (repeatable)",
    )
    args = parser.parse_args()
    if not args.path.exists():
        raise SystemExit(f"no LoCoMo file at {args.path}; pass its path")
    asyncio.run(
        run(
            args.path,
            args.embedder,
            args.conversations,
            args.granularity or GRANULARITIES,
            args.mode or MODES,
            [tuple(item.split("=", 1)) for item in args.memory],
        )
    )


if __name__ == "__main__":
    main()
