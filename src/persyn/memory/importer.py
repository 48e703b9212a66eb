"""`persyn memory import`: bring existing history in as autobiographical records.

The file is JSON Lines, one record per line:

    {"time": "2026-03-04T18:30:00+00:00",       # ISO 8601, when it happened (naive = UTC)
     "channel": "discord:general",               # a channel key `service:channel`;
                                                 #   a bare name means `import:NAME`
     "participants": ["Ann", "01J9Z3K4W5..."],   # names or person ids (the agent excluded)
     "summary": "I helped Ann plan her trip.",   # the first-person narrative
     "importance": 6,                            # optional, 1-10 (default 5)
     "tags": ["travel"],                         # optional
     "emotion": "curious",                       # optional
     "sensitivity": "private",                   # optional: public|private|confidential|restricted
     "ref": "export-123",                        # optional external id, unique per agent
     "dialog": [{"speaker": "Ann", "text": "…", "time": "…"}]}   # optional raw exchange

- Each line stands alone: a bad line is reported with its number and reason and the good
  lines still import.
- Re-importing never duplicates: a line's `ref` (or, without one, a hash of its time,
  channel and summary) is stored as the record's ref, and a known ref is skipped.
- Record ids are ULIDs whose time part is the line's `time`, so imported history sorts
  among live memories by when it happened.
- Summaries are embedded in batches; an unavailable encoder stores records without vectors
  (keyword recall finds them; `persyn memory reindex` adds vectors later) and says so.
- `dialog` is stored as the messages of a conversation of kind "imported" on a channel of
  its own, so "remember harder" can pull the raw exchange by the record's id. The record's
  id is the one the consolidator would derive for that conversation, so closing it later
  never consolidates it a second time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from persyn.core.config import AgentConfig
from persyn.core.errors import InputError
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory.embedder import Embedder
from persyn.store.base import Message, Role, Store

__all__ = [
    "IMPORT_SERVICE",
    "ImportLine",
    "ImportProblem",
    "ImportReport",
    "ParticipantResolver",
    "import_channel_key",
    "import_jsonl",
]

IMPORT_SERVICE = "import"

# (name or person id, channel key) -> person id. The CLI creates people it has not met.
ParticipantResolver = Callable[[str, str], Awaitable[str]]
Progress = Callable[[int, int], None]  # (lines done, lines in the file)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class DialogLine(_Strict):
    speaker: str = Field(min_length=1)
    text: str
    time: datetime | None = None

    @field_validator("time")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _as_utc(value)


class ImportLine(_Strict):
    """One line of an import file (see the module docstring)."""

    time: datetime
    channel: str = Field(min_length=1)
    participants: list[str] = Field(default_factory=list[str])
    summary: str = Field(min_length=1)
    importance: int = Field(default=5, ge=1, le=10)
    tags: list[str] = Field(default_factory=list[str])
    emotion: str | None = None
    sensitivity: Sensitivity | None = None
    ref: str | None = Field(default=None, min_length=1, max_length=500)
    dialog: list[DialogLine] = Field(default_factory=list[DialogLine])

    @field_validator("time")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return _as_utc(value)

    def key(self) -> str:
        """The record's ref: the given one, or a hash of what makes the line this memory."""
        if self.ref:
            return self.ref
        digest = hashlib.sha256(f"{self.time.isoformat()}\x1f{self.channel}\x1f{self.summary}".encode())
        return f"sha256:{digest.hexdigest()[:32]}"


class ImportProblem(BaseModel):
    model_config = ConfigDict(frozen=True)

    line: int
    reason: str


class ImportReport(BaseModel):
    """What an import did. `problems` name the lines that were not imported and why."""

    model_config = ConfigDict(frozen=True)

    path: str
    imported: int = 0
    duplicates: int = 0  # lines whose ref was already known (earlier imports, or earlier lines)
    messages: int = 0  # dialog lines stored
    without_vectors: int = 0  # imported records the encoder could not embed
    problems: tuple[ImportProblem, ...] = ()
    degraded: str | None = None  # why some records have no vector

    @property
    def lines(self) -> int:
        return self.imported + self.duplicates + len(self.problems)


def import_channel_key(channel: str) -> str:
    """A line's `channel` as a channel key: `service:channel` as given, a bare name under
    the `import` service."""
    return channel if ":" in channel else f"{IMPORT_SERVICE}:{channel}"


@dataclass
class _Tally:
    imported: int = 0
    duplicates: int = 0
    messages: int = 0
    without_vectors: int = 0
    degraded: str | None = None


async def import_jsonl(
    path: Path,
    store: Store,
    embedder: Embedder | None,
    agent: AgentConfig,
    resolve_participant: ParticipantResolver,
    *,
    batch_size: int = 64,
    progress: Progress | None = None,
    default_sensitivity: Sensitivity = Sensitivity.PRIVATE,
) -> ImportReport:
    """Import `path` into `agent`'s memory (see the module docstring for the format)."""
    try:
        total = sum(1 for _ in _lines(path))
    except OSError as exc:
        raise InputError(f"cannot read import file {str(path)!r}: {exc.strerror or exc}") from exc
    problems: list[ImportProblem] = []
    tally = _Tally()
    seen: set[str] = set()
    batch: list[tuple[int, ImportLine]] = []
    done = 0

    async def flush() -> None:
        nonlocal done
        if batch:
            await _import_batch(
                batch, store, embedder, agent, resolve_participant, default_sensitivity, tally, problems
            )
            done += len(batch)
            batch.clear()
        if progress is not None:
            progress(done, total)

    for number, raw in _lines(path):
        parsed = _parse(number, raw)
        if isinstance(parsed, ImportProblem):
            problems.append(parsed)
            done += 1
            continue
        ref = parsed.key()
        if ref in seen or await store.get_record_by_ref(agent.id, ref) is not None:
            tally.duplicates += 1
            done += 1
            continue
        seen.add(ref)
        batch.append((number, parsed))
        if len(batch) >= max(1, batch_size):
            await flush()
    await flush()
    return ImportReport(
        path=str(path),
        imported=tally.imported,
        duplicates=tally.duplicates,
        messages=tally.messages,
        without_vectors=tally.without_vectors,
        problems=tuple(sorted(problems, key=lambda p: p.line)),
        degraded=tally.degraded,
    )


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line; numbers count blank lines too."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield number, raw


def _parse(number: int, raw: str) -> ImportLine | ImportProblem:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ImportProblem(line=number, reason=f"not JSON: {exc.msg} at column {exc.colno}")
    if not isinstance(data, dict):
        return ImportProblem(line=number, reason=f"expected a JSON object, got {type(data).__name__}")
    try:
        return ImportLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return ImportProblem(line=number, reason=f"{where}: {first['msg']}{more}")


async def _import_batch(
    batch: Sequence[tuple[int, ImportLine]],
    store: Store,
    embedder: Embedder | None,
    agent: AgentConfig,
    resolve: ParticipantResolver,
    default_sensitivity: Sensitivity,
    tally: _Tally,
    problems: list[ImportProblem],
) -> None:
    vectors: list[list[float]] | None = None
    if embedder is not None:
        try:
            vectors = await embedder.embed([line.summary for _, line in batch])
        except Exception as exc:  # fail soft: keep the memories, reindex adds vectors later
            tally.degraded = f"encoder {embedder.name!r} unavailable ({exc}); run `persyn memory reindex`"
    elif tally.degraded is None:
        tally.degraded = "no encoder is available; run `persyn memory reindex` when it is"
    records: list[MemoryRecord] = []
    record_vectors: list[list[float] | None] = []
    for position, (number, line) in enumerate(batch):
        channel = import_channel_key(line.channel)
        try:
            participants = tuple(dict.fromkeys([await resolve(name, channel) for name in line.participants]))
            others = {d.speaker for d in line.dialog if d.speaker.lower() != agent.name.lower()}
            speakers = {name.lower(): await resolve(name, channel) for name in sorted(others)}
        except InputError as exc:
            problems.append(ImportProblem(line=number, reason=str(exc)))
            continue
        record_id = derived_id(line.time, agent.id, "imported", line.key())
        conversation_id: str | None = None
        message_ids: tuple[str, ...] = ()
        if line.dialog:
            conversation_id, message_ids = await _store_dialog(
                store, agent, line, channel, participants, speakers
            )
            # The id the consolidator derives for this conversation: it then sees the
            # conversation as already remembered and never summarises it again.
            record_id = derived_id(line.time, conversation_id, "memory")
        records.append(
            MemoryRecord(
                id=record_id,
                agent_id=agent.id,
                created_at=line.time,
                channel=channel,
                participant_ids=participants,
                summary=line.summary,
                importance=line.importance,
                tags=tuple(t for t in line.tags if t),
                emotion=line.emotion or None,
                sensitivity=line.sensitivity or default_sensitivity,
                conversation_id=conversation_id,
                message_ids=message_ids,
                ref=line.key(),
                kind="imported",
            )
        )
        record_vectors.append(vectors[position] if vectors is not None else None)
    # One transaction for the whole batch (Store.add_records), not one per record.
    model = embedder.name if vectors is not None and embedder is not None else None
    added = await store.add_records(records, record_vectors, model)
    for record, vector, was_added in zip(records, record_vectors, added, strict=True):
        if was_added:
            tally.imported += 1
            tally.messages += len(record.message_ids)
            tally.without_vectors += vector is None
        else:
            tally.duplicates += 1


async def _store_dialog(
    store: Store,
    agent: AgentConfig,
    line: ImportLine,
    channel: str,
    participants: tuple[str, ...],
    speakers: dict[str, str],
) -> tuple[str, tuple[str, ...]]:
    """The dialog as a conversation of kind "imported" on a channel of its own (so no live
    dialog ever joins it), its messages in order. Returns (conversation id, message ids)."""
    people = tuple(dict.fromkeys([*participants, *speakers.values()]))
    conversation = await store.open_conversation(
        agent.id,
        IMPORT_SERVICE,
        f"{channel}#{line.key()}",
        people,
        now=line.time,
        idle_timeout_seconds=0.0,
        kind="imported",
    )
    ids: list[str] = []
    for index, said in enumerate(line.dialog):
        # Undated lines follow the record's time a millisecond apart, keeping their order.
        at = said.time or line.time + timedelta(milliseconds=index)
        is_agent = said.speaker.lower() == agent.name.lower()
        message = Message(
            id=derived_id(at, conversation.id, "imported", str(index)),
            agent_id=agent.id,
            conversation_id=conversation.id,
            role=Role.AGENT if is_agent else Role.USER,
            person_id=None if is_agent else speakers[said.speaker.lower()],
            speaker_name=said.speaker,
            text=said.text,
            created_at=at,
            event_id=None,
        )
        if await store.add_message(message):
            ids.append(message.id)
    return conversation.id, tuple(ids)
