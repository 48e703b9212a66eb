"""The memory sub-port (SPEC §4.1, §4.4, §5): long-term memory records with their vectors and
full-text index, quick facts and observations about people."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.ports.dialog import Conversation, Message
from persyn.store.rows import GLOBAL, AgentId, Provenance, Row, ulid

__all__ = [
    "ImportedMemory",
    "MemoryPort",
    "Observation",
    "ObservationChange",
    "QuickFact",
    "RecallCandidate",
    "RecallHits",
]


@dataclass(frozen=True, slots=True)
class RecallCandidate:
    """A stored record as recall scores it: what the access rules and the fused score read,
    without the whole record. Recall weighs a few hundred candidates a turn and keeps a few
    dozen; only those are built in full (`record()`), which was most of a turn's memory cost.
    Read back from storage, so already validated on the way in."""

    id: str
    created_at: datetime
    channel: str
    participant_ids: tuple[str, ...]
    importance: int
    sensitivity: Sensitivity
    summary: str
    tags: tuple[str, ...]
    build: Callable[[], MemoryRecord] = field(repr=False, compare=False)

    def record(self) -> MemoryRecord:
        return self.build()

    @classmethod
    def of(cls, record: MemoryRecord) -> RecallCandidate:
        return cls(
            id=record.id,
            created_at=record.created_at,
            channel=record.channel,
            participant_ids=record.participant_ids,
            importance=record.importance,
            sensitivity=record.sensitivity,
            summary=record.summary,
            tags=record.tags,
            build=lambda: record,
        )


@dataclass(frozen=True, slots=True)
class RecallHits:
    """One search as recall uses it: the hits, (record_id, value) best first as
    `MemoryPort.vector_candidates` (cosine distance) or `keyword_candidates` (BM25) return
    them, and the recall candidates of the hits' records (any order; a hit whose record is
    gone has none)."""

    hits: list[tuple[str, float]]
    candidates: list[RecallCandidate]


class Observation(Row):
    """A specific fact about a person (SPEC §4.4), from the conversation it was learned in."""

    id: Annotated[str, ulid("observation id")]
    agent_id: AgentId
    subject_id: Annotated[str, ulid("subject id")]
    kind: str  # a type label, e.g. "occupation", "preference", "relationship"
    value: str
    observed_at: datetime
    conversation_id: str | None = None


class ObservationChange(Row):
    """One entry of the audit trail: what changed about an observation, and why."""

    id: str
    subject_id: str
    observation_id: str
    action: str  # added | superseded | contradicted | supplemented
    before: str | None
    after: str | None
    reason: str
    at: datetime


class QuickFact(Row):
    """One quick fact about a person or the agent itself, as kept in one scope: the same
    key may hold a different value in each provenance it was noted in."""

    subject_id: str
    key: str
    value: str
    updated_at: datetime
    provenance: Provenance = GLOBAL


@dataclass(frozen=True)
class ImportedMemory:
    """One line of imported history as `Store.add_imported` writes it: the record (and its
    vector) and, when the line had dialog, its conversation — already closed — with its
    messages and the flags that say what is already done with it."""

    record: MemoryRecord
    vector: Sequence[float] | None = None
    conversation: Conversation | None = None
    messages: Sequence[Message] = ()
    flags: Sequence[tuple[str, str]] = ()


class MemoryPort(ABC):
    """What the agent remembers."""

    @abstractmethod
    async def add_record(
        self, record: MemoryRecord, vector: Sequence[float] | None, embedding_model: str | None
    ) -> bool:
        """Store a record (and its vector, if the encoder was available). Returns False and
        changes nothing when a record with the same id, or the same non-null `ref` for this
        agent, exists (re-importing history never duplicates)."""

    @abstractmethod
    async def add_records(
        self,
        records: Sequence[MemoryRecord],
        vectors: Sequence[Sequence[float] | None] | None,
        embedding_model: str | None,
    ) -> list[bool]:
        """Bulk `add_record` (imports, benchmarks): `vectors[i]` belongs to `records[i]`
        (None: no vector; `vectors=None`: none at all), every vector from `embedding_model`.
        Returns, per record, whether it was stored — as calling `add_record` for each in
        order would: a record whose id or ref exists, or came earlier in the batch, is
        skipped. One transaction: bad input anywhere (InputError) stores nothing."""

    @abstractmethod
    async def add_imported(self, items: Sequence[ImportedMemory], embedding_model: str | None) -> list[bool]:
        """A batch of imported history in one transaction: each item's conversation (with
        its given id, as given: closed), its participant index, messages and flags, then
        the records as `add_records` stores them. A kill leaves all of a batch or none of
        it. Idempotent: existing conversations, messages and flags are kept as they are, so
        a re-run completes what an earlier run left out. Returns, per item, whether its
        record was stored."""

    def bulk_load(self, expected_records: int) -> AbstractAsyncContextManager[None]:
        """A large load is about to be written: about `expected_records` records, through
        `add_records` / `add_imported` inside this context (an import, a benchmark's fill).
        A backend may prepare its indexes for it; PostgreSQL takes a large load's HNSW
        index away and builds it once at the end (ARCHITECTURE §7.2). Reads stay correct
        throughout, and an interrupted load leaves its committed batches and a working
        store. The default (SQLite, whose codes are rebuilt geometrically) does nothing."""
        del expected_records
        return nullcontext()

    @abstractmethod
    async def link_record_messages(self, agent_id: str, record_id: str, message_ids: Sequence[str]) -> bool:
        """Set a record's `message_ids` (repairing an import an older version left without
        its links). False if there is no such record."""

    @abstractmethod
    async def get_record(self, agent_id: str, record_id: str) -> MemoryRecord | None: ...

    @abstractmethod
    async def get_record_by_ref(self, agent_id: str, ref: str) -> MemoryRecord | None: ...

    @abstractmethod
    async def records_by_ids(self, agent_id: str, record_ids: Sequence[str]) -> list[MemoryRecord]:
        """The records that exist among `record_ids` (any order)."""

    async def recall_candidates(self, agent_id: str, record_ids: Sequence[str]) -> list[RecallCandidate]:
        """`records_by_ids` as recall candidates (any order). A backend may build each
        record only when its candidate's `record()` is asked for."""
        return [RecallCandidate.of(record) for record in await self.records_by_ids(agent_id, record_ids)]

    @abstractmethod
    async def list_records(
        self, agent_id: str, *, limit: int = 50, before_id: str | None = None
    ) -> list[MemoryRecord]:
        """Newest first; `before_id` pages backwards."""

    @abstractmethod
    async def delete_records(self, agent_id: str, record_ids: Sequence[str]) -> int:
        """Delete records (and their vectors and index entries); return how many went."""

    @abstractmethod
    async def count_records(self, agent_id: str) -> int: ...

    @abstractmethod
    async def record_stats(self, agent_id: str) -> dict[str, object]:
        """Counts by channel, sensitivity and importance; oldest/newest; vectors by model."""

    @abstractmethod
    async def vector_candidates(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """Nearest records by cosine distance (smaller is closer), filtered by agent and,
        when given, by channel key. Only vectors of `len(vector)` dimensions are searched.
        Returns (record_id, distance), closest first. A backend may answer approximately
        (an ANN index) but returns exact distances: SQLite is exact per channel below 2,000
        vectors and uses binary codes with an exact re-rank above (ARCHITECTURE §7.1)."""

    async def vector_recall(
        self, agent_id: str, vector: Sequence[float], k: int, channels: Sequence[str] | None
    ) -> RecallHits:
        """`vector_candidates` and the `recall_candidates` of its hits, as recall asks for
        them together. The default is those two calls; a backend may answer both at once
        (PostgreSQL: one statement, the nearest hits joined to their rows)."""
        return await self._with_candidates(
            agent_id, await self.vector_candidates(agent_id, vector, k, channels)
        )

    async def _with_candidates(self, agent_id: str, hits: list[tuple[str, float]]) -> RecallHits:
        if not hits:
            return RecallHits([], [])
        return RecallHits(hits, await self.recall_candidates(agent_id, [record_id for record_id, _ in hits]))

    async def warm_recall(self, agent_id: str) -> int:
        """Bring into memory what recall searches for this agent, ahead of its first recall
        after a start; returns how many indexes were loaded. The default has none to load
        (SQLite loads its large channels' vector codes, `_sqlite_ann`)."""
        del agent_id
        return 0

    @abstractmethod
    async def keyword_candidates(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """Full-text matches over record summaries and tags: (record_id, bm25 score) with
        higher = better, best first. Any words match (OR), ranked by BM25; FTS syntax in the
        query is treated as plain words."""

    async def keyword_recall(
        self, agent_id: str, query: str, k: int, channels: Sequence[str] | None
    ) -> RecallHits:
        """`keyword_candidates` and the `recall_candidates` of its hits, as recall asks for
        them together. The default is those two calls; PostgreSQL reads the candidates in
        the statement that ranks the hits."""
        return await self._with_candidates(
            agent_id, await self.keyword_candidates(agent_id, query, k, channels)
        )

    @abstractmethod
    async def set_record_vector(
        self, agent_id: str, record_id: str, vector: Sequence[float], embedding_model: str
    ) -> None:
        """Replace a record's vector (reindex after a model change)."""

    @abstractmethod
    async def records_needing_vectors(
        self, agent_id: str, embedding_model: str, limit: int
    ) -> list[MemoryRecord]:
        """Records with no vector from `embedding_model` (missing, or from another model)."""

    @abstractmethod
    async def cull_candidates(
        self, agent_id: str, *, below_importance: int, older_than: datetime
    ) -> list[MemoryRecord]:
        """Records rated below the threshold AND formed before `older_than` (SPEC §4.1)."""

    @abstractmethod
    async def conversation_summaries(self, agent_id: str, conversation_ids: Sequence[str]) -> dict[str, str]:
        """The summary of each conversation among `conversation_ids` that has been
        consolidated into a memory (the newest such record's), by conversation id."""

    @abstractmethod
    async def replace_participant(self, agent_id: str, old_person_id: str, new_person_id: str) -> int:
        """Re-attribute records' participant lists (directory merges); returns records changed."""

    @abstractmethod
    async def set_fact(
        self,
        agent_id: str,
        subject_id: str,
        key: str,
        value: str | None,
        now: datetime,
        *,
        provenance: Provenance = GLOBAL,
    ) -> None:
        """Set (or, with None, forget) one quick fact about a person or the agent itself, in
        the scope of `provenance`: the same key in another scope is a different fact."""

    @abstractmethod
    async def facts(self, agent_id: str, subject_id: str) -> dict[str, str]:
        """Every quick fact about a subject, by key, whatever its provenance (the operator's
        view; the newest value of a key held in several scopes)."""

    @abstractmethod
    async def fact_rows(self, agent_id: str, subject_id: str) -> list[QuickFact]:
        """Every quick fact about a subject with its provenance, by key, newest first within one."""

    @abstractmethod
    async def add_observation(self, observation: Observation, action: str, reason: str) -> None:
        """Store a new observation and its audit entry (`action`: added or supplemented)."""

    @abstractmethod
    async def revise_observation(
        self, agent_id: str, observation_id: str, value: str | None, action: str, reason: str, now: datetime
    ) -> None:
        """Change an observation's value, or delete it (value None), with an audit entry."""

    @abstractmethod
    async def observations(self, agent_id: str, subject_id: str) -> list[Observation]:
        """Every current observation about a subject, oldest first."""

    @abstractmethod
    async def observation_history(self, agent_id: str, subject_id: str) -> list[ObservationChange]:
        """The audit trail of a subject's observations, oldest first."""
