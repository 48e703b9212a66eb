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
  lines still import. Lines are read at most `max_line_bytes` at a time, so a huge line is
  reported, never held in memory; every text field is held to the limits of a live
  message (`[conversation] max_message_chars`, no NUL characters), names, tags and lists
  to the bounds of `ImportLimits`.
- Re-importing never duplicates: a line's `ref` (or, without one, a hash of its time,
  channel and summary) is stored as the record's ref, and a known ref is skipped.
- Record ids carry the line's `time` (`core/ids.py`; times before 1970 included), so
  imported history sorts among live memories by when it happened.
- Summaries are embedded in batches; an unavailable encoder stores records without vectors
  (keyword recall finds them; `persyn memory reindex` adds vectors later) and says so.
- `dialog` is stored as the messages of a conversation of kind "imported" on a channel of
  its own, so "remember harder" can pull the raw exchange by the record's id. The
  conversation is stored closed and its consolidation done: it came with its summary, so no
  close hook or sweep ever summarises it (or extracts from it) again, and a culled imported
  memory stays culled. Extracting the graph and observations from imported dialog is a
  separate, opt-in step (`persyn memory import --extract`).
- A batch's conversations, messages and records are written in one transaction, and every
  id is derived from the line, so a killed import re-run completes exactly what is missing.
  Re-running a file an older version imported repairs what that version left: a record
  without its message links gets them, a conversation left open is closed, its consolidation done.
- `--as NAME=CONTACT` (`SpeakerContact`) says that a participant or speaker called NAME in the
  file is an existing contact: the resolver the caller passes maps NAME to that contact's id,
  so the records and dialog name them exactly as if they had said it live, and the access
  rules (memory/access.py) treat it as theirs. Every other name still becomes a contact of
  its own. A line imported before keeps the people it was imported with (its ref is known).
- The resolver is told when the history shows each person (a participant: the line's time; a
  speaker: their last dialog line), so a contact is last seen then, not at the import.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from persyn.core.config import AgentConfig
from persyn.core.errors import InputError
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory.consolidate import IMPORTED_KIND
from persyn.memory.embedder import Embedder
from persyn.store.base import Conversation, ImportedMemory, Message, Role
from persyn.store.capabilities import MemoryStore, capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.jobs import Consolidation, ConsolidationStatus, JobsPort

__all__ = [
    "IMPORT_SERVICE",
    "ImportLimits",
    "ImportLine",
    "ImportProblem",
    "ImportReport",
    "ParticipantResolver",
    "SpeakerContact",
    "import_channel_key",
    "import_jsonl",
    "imported_conversation_id",
    "parse_speaker_contact",
    "read_speaker_contacts",
]

IMPORT_SERVICE = "import"

# (name or person id, channel key, when the history shows them last) -> person id. The CLI
# creates people it has not met, and dates their "last seen" by the history, not the import.
ParticipantResolver = Callable[[str, str, datetime], Awaitable[str]]
# (records done, records in the file): lines that parse, so bad lines never count.
Progress = Callable[[int, int], None]

_LATEST = datetime(9999, 12, 30, tzinfo=UTC)  # undated dialog lines add milliseconds to it
_SKIP_CHUNK = 1 << 16


@dataclass(frozen=True)
class ImportLimits:
    """What one line may hold. Text (the summary, each dialog line) is held to the limit of
    a live message; the line as a whole is read at most `max_line_bytes` at a time, before
    any JSON parsing, so no line can take more memory than that."""

    max_text_chars: int = 32_000  # [conversation] max_message_chars
    max_line_bytes: int = 4 * 1024 * 1024
    max_name_chars: int = 200  # a participant, a speaker
    max_participants: int = 100
    max_dialog_messages: int = 2_000
    max_tags: int = 32
    max_label_chars: int = 100  # a tag, the emotion
    max_channel_chars: int = 200


@dataclass(frozen=True)
class SpeakerContact:
    """`NAME=CONTACT`: the person called NAME in an import file is the existing contact
    CONTACT (an id or a name exactly one contact goes by). `where` is where it was given
    (`--as`, or `FILE:LINE`), for errors."""

    name: str
    contact: str
    where: str


_MAX_ATTRIBUTION_FILE_BYTES = 1 << 20


def parse_speaker_contact(text: str, where: str, limits: ImportLimits | None = None) -> SpeakerContact:
    """One `NAME=CONTACT` (split at the first `=`), or an InputError naming `where`."""
    limits = limits or ImportLimits()
    name, equals, contact = text.partition("=")
    name, contact = " ".join(name.split()), contact.strip()
    if not equals or not name or not contact:
        raise InputError(f'{where}: {text!r}: use NAME=CONTACT, e.g. Sam=01J9Z3K4W5... or Sam="Sam Okafor"')
    if len(name) > limits.max_name_chars or "\x00" in text:
        raise InputError(f"{where}: {text!r}: a name is 1 to {limits.max_name_chars} characters, without NUL")
    return SpeakerContact(name=name, contact=contact, where=where)


def read_speaker_contacts(path: Path, limits: ImportLimits | None = None) -> list[SpeakerContact]:
    """Every `NAME=CONTACT` line of a mapping file (blank lines and `#` comments skipped),
    all checked before any is used."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_ATTRIBUTION_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    if len(raw) > _MAX_ATTRIBUTION_FILE_BYTES:
        raise InputError(f"{path}: a mapping file is at most {_MAX_ATTRIBUTION_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (bad byte at position {exc.start})") from exc
    return [
        parse_speaker_contact(line, f"{path}:{number}", limits)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


def _as_utc(value: datetime) -> datetime:
    try:
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()!r} is out of range") from None
    if moment >= _LATEST:
        raise ValueError(f"{value.isoformat()!r} is too far in the future")
    return moment


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

    @field_validator("importance", mode="before")
    @classmethod
    def _a_number_not_a_flag(cls, value: object) -> object:
        if isinstance(value, bool):  # JSON true would otherwise import as importance 1
            raise ValueError(f"importance must be a whole number from 1 to 10, not {value!r}")
        return value

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
    repaired: int = 0  # of those, records whose missing message links this run completed
    messages: int = 0  # dialog lines stored
    without_vectors: int = 0  # imported records the encoder could not embed
    problems: tuple[ImportProblem, ...] = ()
    degraded: str | None = None  # why some records have no vector
    # The imported conversations of the file's lines with dialog (stored now or earlier):
    # what `persyn memory import --extract` reads.
    conversations: tuple[str, ...] = ()

    @property
    def lines(self) -> int:
        return self.imported + self.duplicates + len(self.problems)


def import_channel_key(channel: str) -> str:
    """A line's `channel` as a channel key: `service:channel` as given, a bare name under
    the `import` service."""
    return channel if ":" in channel else f"{IMPORT_SERVICE}:{channel}"


def imported_conversation_id(agent_id: str, line: ImportLine) -> str:
    """The conversation a line's dialog is stored as: derived from the line, so a re-run
    after a kill writes into the same one."""
    return derived_id(line.time, agent_id, IMPORTED_KIND, line.key(), "conversation")


@dataclass
class _Tally:
    imported: int = 0
    duplicates: int = 0
    repaired: int = 0
    messages: int = 0
    without_vectors: int = 0
    degraded: str | None = None
    conversations: list[str] = field(default_factory=list[str])


async def import_jsonl(
    path: Path,
    store: MemoryStore,
    embedder: Embedder | None,
    agent: AgentConfig,
    resolve_participant: ParticipantResolver,
    *,
    batch_size: int = 64,
    progress: Progress | None = None,
    default_sensitivity: Sensitivity = Sensitivity.PRIVATE,
    limits: ImportLimits | None = None,
) -> ImportReport:
    """Import `path` into `agent`'s memory (see the module docstring for the format)."""
    limits = limits or ImportLimits()
    try:
        total = sum(
            1
            for number, raw in _lines(path, limits.max_line_bytes)
            if not isinstance(raw, ImportProblem) and isinstance(_parse(number, raw, limits), ImportLine)
        )
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

    # A large file is loaded as one bulk load (PostgreSQL builds its vector index once).
    async with store.bulk_load(total):
        for number, raw in _lines(path, limits.max_line_bytes):
            parsed = raw if isinstance(raw, ImportProblem) else _parse(number, raw, limits)
            if isinstance(parsed, ImportProblem):
                problems.append(parsed)
                continue
            ref = parsed.key()
            known = None if ref in seen else await store.get_record_by_ref(agent.id, ref)
            if ref in seen or known is not None:
                if known is not None and await _complete_links(store, known, parsed, limits):
                    tally.repaired += 1
                if known is not None:
                    await _settle(store, known)
                if known is not None and known.conversation_id and known.kind == IMPORTED_KIND:
                    tally.conversations.append(known.conversation_id)
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
        repaired=tally.repaired,
        messages=tally.messages,
        without_vectors=tally.without_vectors,
        problems=tuple(sorted(problems, key=lambda p: p.line)),
        degraded=tally.degraded,
        conversations=tuple(dict.fromkeys(tally.conversations)),
    )


def _lines(path: Path, max_bytes: int) -> Iterator[tuple[int, str | ImportProblem]]:
    """(line number, text) of every non-blank line, or a problem for a line that is too
    long or not UTF-8; numbers count blank lines too. A line is never read whole beyond
    `max_bytes`: the rest of a longer one is skipped in small chunks."""
    with path.open("rb") as handle:
        number = 0
        while chunk := handle.readline(max_bytes + 1):
            number += 1
            if len(chunk) > max_bytes and not chunk.endswith(b"\n"):
                size = len(chunk)
                while (rest := handle.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
                    size += len(rest)
                size += len(rest)
                yield (
                    number,
                    ImportProblem(
                        line=number, reason=f"line is longer than {max_bytes} bytes ({size} bytes)"
                    ),
                )
                continue
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield (
                    number,
                    ImportProblem(line=number, reason=f"not valid UTF-8 (bad byte at position {exc.start})"),
                )
                continue
            if number == 1:
                text = text.removeprefix("\ufeff")
            if text.strip():
                yield number, text


def _parse(number: int, raw: str, limits: ImportLimits) -> ImportLine | ImportProblem:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ImportProblem(line=number, reason=f"not JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return ImportProblem(line=number, reason="not JSON: nested too deeply")
    if not isinstance(data, dict):
        return ImportProblem(line=number, reason=f"expected a JSON object, got {type(data).__name__}")
    try:
        line = ImportLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        reason = first["msg"].removeprefix("Value error, ")
        return ImportProblem(line=number, reason=f"{where}: {reason}{more}")
    beyond = _beyond_limits(line, limits)
    return ImportProblem(line=number, reason=beyond) if beyond else line


def _beyond_limits(line: ImportLine, limits: ImportLimits) -> str | None:
    """The first field of `line` that exceeds `limits` or holds a NUL, as "field: why"."""
    text_limit = f"the limit is {limits.max_text_chars} ([conversation] max_message_chars)"
    checks: list[tuple[str, str | None, int, str]] = [
        ("channel", line.channel, limits.max_channel_chars, f"the limit is {limits.max_channel_chars}"),
        ("summary", line.summary, limits.max_text_chars, text_limit),
        ("emotion", line.emotion, limits.max_label_chars, f"the limit is {limits.max_label_chars}"),
        ("ref", line.ref, 500, "the limit is 500"),
    ]
    counts = [
        ("participants", len(line.participants), limits.max_participants),
        ("tags", len(line.tags), limits.max_tags),
        ("dialog", len(line.dialog), limits.max_dialog_messages),
    ]
    for where, count, most in counts:
        if count > most:
            return f"{where}: {count} entries; the limit is {most}"
    for index, name in enumerate(line.participants):
        checks.append(
            (f"participants.{index}", name, limits.max_name_chars, f"the limit is {limits.max_name_chars}")
        )
    for index, tag in enumerate(line.tags):
        checks.append(
            (f"tags.{index}", tag, limits.max_label_chars, f"the limit is {limits.max_label_chars}")
        )
    for index, said in enumerate(line.dialog):
        speaker_limit = f"the limit is {limits.max_name_chars}"
        checks.append((f"dialog.{index}.speaker", said.speaker, limits.max_name_chars, speaker_limit))
        checks.append((f"dialog.{index}.text", said.text, limits.max_text_chars, text_limit))
    for where, value, most, why in checks:
        if value is None:
            continue
        if len(value) > most:
            return f"{where}: {len(value)} characters; {why}"
        if "\x00" in value:
            return f"{where}: contains a NUL character"
    return None


async def _complete_links(
    store: MemoryStore, record: MemoryRecord, line: ImportLine, limits: ImportLimits
) -> bool:
    """A record an older import stored without all its message links (killed between its
    dialog and its record, then re-run) gets the links of the dialog that is stored."""
    if not line.dialog or record.conversation_id is None or len(record.message_ids) >= len(line.dialog):
        return False
    stored = await store.recent_messages(record.agent_id, record.conversation_id, limits.max_dialog_messages)
    if len(stored) <= len(record.message_ids):
        return False
    return await store.link_record_messages(record.agent_id, record.id, [m.id for m in stored])


async def _settle(store: MemoryStore, record: MemoryRecord) -> None:
    """Close (its consolidation done) the conversation an older import left open (the first
    `persyn run` would otherwise close it and run its model hooks), as of its last message."""
    if record.kind != IMPORTED_KIND or record.conversation_id is None:
        return
    conversation = await store.get_conversation(record.agent_id, record.conversation_id)
    if conversation is None or conversation.kind != IMPORTED_KIND or conversation.closed_at is not None:
        return
    jobs = capability(store, JobsPort)
    if jobs is not None and await jobs.get_consolidation(record.agent_id, conversation.id) is None:
        await jobs.set_consolidation(
            Consolidation(
                agent_id=record.agent_id,
                conversation_id=conversation.id,
                status=ConsolidationStatus.DONE,
                detail=IMPORTED_KIND,
                updated_at=conversation.last_activity_at,
            )
        )
    history = capability(store, DialogHistoryPort)
    if history is not None:  # without it, it closes once idle, as any conversation
        await history.close_conversation(record.agent_id, conversation.id, conversation.last_activity_at)


async def _import_batch(
    batch: Sequence[tuple[int, ImportLine]],
    store: MemoryStore,
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
    items: list[ImportedMemory] = []
    for position, (number, line) in enumerate(batch):
        channel = import_channel_key(line.channel)
        try:
            participants = tuple(
                dict.fromkeys([await resolve(name, channel, line.time) for name in line.participants])
            )
            spoke = _last_spoken(line, agent.name)
            speakers = {name.lower(): await resolve(name, channel, spoke[name]) for name in sorted(spoke)}
        except InputError as exc:
            problems.append(ImportProblem(line=number, reason=str(exc)))
            continue
        vector = vectors[position] if vectors is not None else None
        items.append(_imported(agent, line, channel, participants, speakers, default_sensitivity, vector))
    # One transaction for the whole batch: its conversations, messages and records.
    model = embedder.name if vectors is not None and embedder is not None else None
    added = await store.add_imported(items, model)
    for item, was_added in zip(items, added, strict=True):
        if item.conversation is not None:
            tally.conversations.append(item.conversation.id)
        if was_added:
            tally.imported += 1
            tally.messages += len(item.record.message_ids)
            tally.without_vectors += item.vector is None
        else:
            tally.duplicates += 1


def _said_at(line: ImportLine, index: int) -> datetime:
    """When the line's dialog message `index` was said: undated ones follow the record's time
    a millisecond apart, keeping their order."""
    return line.dialog[index].time or line.time + timedelta(milliseconds=index)


def _last_spoken(line: ImportLine, agent_name: str) -> dict[str, datetime]:
    """Each speaker of the line's dialog but the agent -> the last time they spoke in it."""
    spoke: dict[str, datetime] = {}
    for index, spoken in enumerate(line.dialog):
        if spoken.speaker.lower() != agent_name.lower():
            at = _said_at(line, index)
            spoke[spoken.speaker] = max(at, spoke.get(spoken.speaker, at))
    return spoke


def _imported(
    agent: AgentConfig,
    line: ImportLine,
    channel: str,
    participants: tuple[str, ...],
    speakers: dict[str, str],
    default_sensitivity: Sensitivity,
    vector: Sequence[float] | None,
) -> ImportedMemory:
    """A line as what the store writes: the record and, with dialog, its conversation —
    on a channel of its own (no live dialog ever joins it), closed at its last message and
    its consolidation done at import — and its messages in order."""
    record_id = derived_id(line.time, agent.id, IMPORTED_KIND, line.key())
    conversation: Conversation | None = None
    said: list[Message] = []
    if line.dialog:
        conversation_id = imported_conversation_id(agent.id, line)
        for index, spoken in enumerate(line.dialog):
            at = _said_at(line, index)
            is_agent = spoken.speaker.lower() == agent.name.lower()
            said.append(
                Message(
                    id=derived_id(at, conversation_id, IMPORTED_KIND, str(index)),
                    agent_id=agent.id,
                    conversation_id=conversation_id,
                    role=Role.AGENT if is_agent else Role.USER,
                    person_id=None if is_agent else speakers[spoken.speaker.lower()],
                    speaker_name=spoken.speaker,
                    text=spoken.text,
                    created_at=at,
                    event_id=None,
                )
            )
        ended = max([line.time, *(m.created_at for m in said)])
        conversation = Conversation(
            id=conversation_id,
            agent_id=agent.id,
            service=IMPORT_SERVICE,
            channel=f"{channel}#{line.key()}",
            participant_ids=tuple(dict.fromkeys([*participants, *speakers.values()])),
            started_at=line.time,
            last_activity_at=ended,
            closed_at=ended,
            kind=IMPORTED_KIND,
        )
        # The id the consolidator derives for this conversation (belt and braces: the
        # flag already says it is remembered).
        record_id = derived_id(line.time, conversation_id, "memory")
    record = MemoryRecord(
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
        conversation_id=None if conversation is None else conversation.id,
        message_ids=tuple(m.id for m in said),
        ref=line.key(),
        kind=IMPORTED_KIND,
    )
    # Its conversation is consolidated at import: `add_imported` records that with it.
    return ImportedMemory(record, vector, conversation, tuple(said))
