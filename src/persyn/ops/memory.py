"""What the `persyn memory` commands do, without starting workers: the store, the encoder
and exactly the retrieval the agent uses when it answers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from persyn.core.clock import Clock, SystemClock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError, ToolError
from persyn.core.ids import is_id, parse_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.gateway.registry import context_window_for
from persyn.memory.dialog_recall import DialogRecall, Recollection, SaidLine, recollect
from persyn.memory.embedder import Embedder, embedder_from_config
from persyn.memory.importer import ImportLimits, ImportReport, SpeakerContact, import_jsonl
from persyn.memory.retrieval import Components, RetrievalResult, Retriever
from persyn.ops.history import opened_capability
from persyn.senses.library import AttachmentLibrary
from persyn.store import Store
from persyn.store.base import Identity, Message
from persyn.store.capabilities import ContactsStore, MemoryStore, capability, command_capability
from persyn.store.ports.activity import ActivityPort, cull_entry
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.emotions import EmotionsPort
from persyn.tools.builtin._contacts import UnknownContact, folded, named_contact, resolve_exactly
from persyn.usage.context import Attribution, bind
from persyn.usage.records import UsageRecord

__all__ = [
    "DEFAULT_RECALL_CHANNEL",
    "SCORE_PARTS",
    "Encoder",
    "ExtractionEstimate",
    "ExtractionReport",
    "MemoryOps",
    "RecallQuery",
    "context_window_for",
    "estimate_extraction",
    "explain",
    "explain_parts",
    "explain_said",
    "extract_imported",
    "memory_ops",
    "open_encoder",
    "read_queries",
    "said_json",
]

DEFAULT_RECALL_CHANNEL = channel_key("terminal", "terminal")
_IMPORT_SERVICE = "import"


@dataclass
class MemoryOps:
    settings: Settings
    agent: AgentConfig
    store: MemoryStore
    embedder: Embedder | None
    degraded: str | None
    clock: Clock = field(default_factory=SystemClock)  # the command's (`persyn --now`)

    @property
    def contacts(self) -> ContactsStore:
        """The store's contact directory: InputError (exit 2) naming it when it has none."""
        return command_capability(self.store, ContactsStore)

    @property
    def retriever(self) -> Retriever:
        return Retriever(self.store, self.embedder, self.settings.memory)

    @property
    def dialog_recall(self) -> DialogRecall | None:
        """The raw dialog recall merges in (`[memory] dialog_recall`), None when it is off or
        the store keeps no dialog history."""
        history = capability(self.store, DialogHistoryPort)
        if history is None or not self.settings.memory.dialog_recall:
            return None
        return DialogRecall(history, self.store, self.embedder, self.settings.memory)

    def budget_tokens(self) -> int:
        return int(context_window_for(self.settings, self.agent) * self.settings.memory.budget_fraction)

    async def resolve_participant(
        self, name_or_id: str, *, create: bool, channel: str = "", seen_at: datetime | None = None
    ) -> str:
        """The one person a name or id names, with no guessing (`named_contact`: an exact
        display name or speaker id, never a prefix). A name several people go by is an
        InputError listing them — never the earliest of them, whose history would then be
        someone else's. Import creates a person for a name nobody goes by; recall does not.

        `seen_at` (import): when the history shows the person. A person it creates is first
        and last seen then, not at the import; a known one's "last seen" moves forward to it,
        never back. A time after the command's clock counts as now."""
        contacts = self.contacts
        if not create:
            return (await named_contact(contacts, self.agent.id, self.agent.name, name_or_id)).id
        now = self.clock.now()
        seen = now if seen_at is None else min(seen_at, now)
        name = " ".join(name_or_id.split())
        try:
            found = await resolve_exactly(contacts, self.agent.id, name_or_id)
        except UnknownContact as exc:
            if is_id(name):
                raise InputError(f"participant {name_or_id!r}: {exc}") from exc
        except ToolError as exc:
            raise InputError(f"participant {name_or_id!r}: {exc}") from exc
        else:
            if seen_at is not None:
                await contacts.touch_person(self.agent.id, found.id, seen)
            return found.id
        identity = Identity(service=_IMPORT_SERVICE, channel=channel or "history", speaker_id=name.lower())
        person = await self.store.resolve_person(self.agent.id, identity, name, "human", seen)
        return person.id

    async def attributed(self, attributions: Sequence[SpeakerContact]) -> dict[str, str]:
        """`--as NAME=CONTACT`: each name (folded) -> the contact's id, every contact found
        exactly (`named_contact`) before anything is imported. The agent's own name is refused
        (its lines are its own), and so is one name given to two contacts."""
        chosen: dict[str, tuple[str, SpeakerContact]] = {}
        for item in attributions:
            key = folded(item.name)
            if key == folded(self.agent.name):
                raise InputError(
                    f"{item.where}: {item.name!r} is {self.agent.name} itself; its lines are its own"
                )
            try:
                person = await named_contact(self.contacts, self.agent.id, self.agent.name, item.contact)
            except InputError as exc:
                raise InputError(f"{item.where}: {item.name}={item.contact}: {exc}") from exc
            earlier = chosen.get(key)
            if earlier is not None and earlier[0] != person.id:
                raise InputError(
                    f"{item.where}: {item.name!r} is already {earlier[0]} ({earlier[1].where}); "
                    "one name is one contact"
                )
            chosen[key] = (person.id, item)
        return {key: person_id for key, (person_id, _) in chosen.items()}

    async def import_file(
        self,
        path: Path,
        progress: Callable[[int, int], None] | None = None,
        attributions: Sequence[SpeakerContact] = (),
    ) -> ImportReport:
        speakers = await self.attributed(attributions)

        async def resolve(name: str, channel: str, seen_at: datetime) -> str:
            mapped = speakers.get(folded(name))
            if mapped is not None:  # `--as`: as if said live, then
                await self.contacts.touch_person(self.agent.id, mapped, min(seen_at, self.clock.now()))
                return mapped
            return await self.resolve_participant(name, create=True, channel=channel, seen_at=seen_at)

        limits = ImportLimits(max_text_chars=self.settings.conversation.max_message_chars)
        return await import_jsonl(
            path, self.store, self.embedder, self.agent, resolve, progress=progress, limits=limits
        )

    async def recall(
        self,
        query: str,
        *,
        channel: str | None,
        participants: Sequence[str],
        now: datetime | None,
        budget_tokens: int | None,
        limit: int | None,
    ) -> RetrievalResult:
        """The memories alone (`recollect` is the agent's whole recall, with the raw dialog)."""
        return (
            await self.recollect(
                query,
                channel=channel,
                participants=participants,
                now=now,
                budget_tokens=budget_tokens,
                limit=limit,
                dialog=False,
            )
        ).memories

    async def recollect(
        self,
        query: str,
        *,
        channel: str | None,
        participants: Sequence[str],
        now: datetime | None,
        budget_tokens: int | None,
        limit: int | None,
        dialog: bool = True,
    ) -> Recollection:
        """Exactly the recall a turn runs (`memory.dialog_recall.recollect`): the memories
        and, with `[memory] dialog_recall`, what was said, merged by score."""
        ids = [await self.resolve_participant(p, create=False) for p in participants]
        return await recollect(
            self.retriever,
            self.dialog_recall if dialog else None,
            self.agent.id,
            query,
            channel=channel or DEFAULT_RECALL_CHANNEL,
            participants=ids,
            now=now or self.clock.now(),
            budget_tokens=budget_tokens or self.budget_tokens(),
            limit=limit,
        )

    async def show(self, record_id: str) -> tuple[MemoryRecord, list[Message]]:
        wanted = parse_id(record_id, what="memory id")
        record = await self.store.get_record(self.agent.id, wanted)
        if record is None:
            raise InputError(f"{self.agent.name} has no memory {wanted!r}")
        dialog: list[Message] = []
        if record.conversation_id:
            dialog = await self.store.recent_messages(self.agent.id, record.conversation_id, 100_000)
            if record.message_ids:
                wanted_ids = set(record.message_ids)
                dialog = [m for m in dialog if m.id in wanted_ids] or dialog
        return record, dialog

    async def emotions(self, record_id: str) -> dict[str, float] | None:
        """The emotional-state distribution kept with a memory (SPEC §4.9), if it has one."""
        history = command_capability(self.store, EmotionsPort)
        found = await history.record_emotions(self.agent.id, [parse_id(record_id, what="memory id")])
        reading = next(iter(found.values()), None)
        return None if reading is None else dict(reading.distribution)

    async def forget(self, record_id: str) -> MemoryRecord:
        """Delete a memory and the verbatim words it was made from (its `message_ids`), so the
        raw-dialog half of recall (`[memory] dialog_recall`) cannot bring it back; then the
        originals nothing holds any more."""
        record, _ = await self.show(record_id)
        await self.store.delete_records(self.agent.id, [record.id])
        history = capability(self.store, DialogHistoryPort)
        if history is not None and record.message_ids:
            await history.forget_messages(self.agent.id, record.message_ids)
        await self.sweep_originals()
        return record

    async def sweep_originals(self, now: datetime | None = None) -> int:
        """Forget the kept originals nothing holds any more (`senses/library.py`), after the
        store has committed what let them go; the bytes freed (0 without dialog history)."""
        history = capability(self.store, DialogHistoryPort)
        if history is None:
            return 0
        held = await history.held_attachments(self.agent.id)
        library = AttachmentLibrary(self.settings.data_dir / "attachments")
        grace = timedelta(hours=self.settings.senses.original_grace_hours)
        return await asyncio.to_thread(library.sweep, self.agent.id, held, now or self.clock.now(), grace)

    async def cull(self, *, dry_run: bool, now: datetime | None = None) -> list[MemoryRecord]:
        """SPEC §4.1: delete records rated below the threshold AND older than the age limit."""
        config = self.settings.memory
        moment = now or self.clock.now()
        doomed = await self.store.cull_candidates(
            self.agent.id,
            below_importance=config.cull_below_importance,
            older_than=moment - timedelta(days=config.cull_after_days),
        )
        if not dry_run and doomed:
            await self.store.delete_records(self.agent.id, [r.id for r in doomed])
            log = capability(self.store, ActivityPort)
            rule = (config.cull_below_importance, config.cull_after_days)
            if log is not None:
                entry = cull_entry(self.agent.id, moment, doomed, *rule, "`persyn memory cull`")
                await log.add_activity(entry)
            await self.sweep_originals(moment)
        return doomed

    async def reindex(self, progress: Callable[[int, int], None] | None = None, batch: int = 64) -> int:
        if self.embedder is None:
            raise InputError(f"the encoder is unavailable ({self.degraded}); nothing can be reindexed")
        total = await self.store.count_records(self.agent.id)
        done = 0
        while True:
            pending = await self.store.records_needing_vectors(self.agent.id, self.embedder.name, batch)
            if not pending:
                break
            vectors = await self.embedder.embed([r.summary for r in pending])
            for record, vector in zip(pending, vectors, strict=True):
                await self.store.set_record_vector(self.agent.id, record.id, vector, self.embedder.name)
            done += len(pending)
            if progress is not None:
                progress(done, total)
        return done


@asynccontextmanager
async def memory_ops(
    settings: Settings, agent: AgentConfig, clock: Clock | None = None, *, encoder: Encoder | None = None
) -> AsyncIterator[MemoryOps]:
    clock = clock or SystemClock()
    async with opened_capability(settings, MemoryStore) as store:
        await store.ensure_agent(agent.id, agent.name, clock.now())
        encoder = encoder or open_encoder(settings)
        yield MemoryOps(settings, agent, store, encoder.embedder, encoder.degraded, clock)


@dataclass(frozen=True)
class Encoder:
    """The configured encoder, or None and why (recall then runs on keywords alone). A
    long-lived process keeps one: an encoder loads its model on its first use (~140 ms for
    the default, measured 2026-12-07), which a new one per request pays every time."""

    embedder: Embedder | None
    degraded: str | None = None


def open_encoder(settings: Settings) -> Encoder:
    try:
        return Encoder(embedder_from_config(settings.memory))
    except Exception as exc:  # fail soft: keyword retrieval still works
        return Encoder(None, f"encoder {settings.memory.embedder!r} unavailable: {exc}")


# The order `--explain` and the console's recall tester show a score's parts in.
SCORE_PARTS = ("similarity", "keyword", "date", "recency", "importance", "participants")


def explain(result: RetrievalResult, index: int) -> dict[str, float | None]:
    """The score parts of `result`'s record at `index` (each in [0, 1], None = not counted
    for this query) and the raw cosine behind the similarity part: what `persyn memory
    recall --explain` prints and the console's recall tester shows, from this one place.
    A part retrieval adds later follows the known ones, so neither view can drop it."""
    return explain_parts(result.components[index], result.records[index].similarity)


def said_json(line: SaidLine) -> dict[str, Any]:
    """A line of raw dialog a recollection merged in, as the console's recall tester shows it
    (with its score parts, `explain_said`)."""
    return {
        "message_id": line.message.id,
        "speaker": line.message.speaker_name,
        "channel": line.channel,
        "text": line.message.text,
        "time": line.message.created_at.isoformat(),
        "score": round(line.score, 6),
        "band": line.band.value,
        "tokens": line.tokens,
        "parts": explain_said(line),
    }


def explain_said(line: SaidLine) -> dict[str, float | None]:
    """`explain` for a line of raw dialog (its cosine is not kept: only the part)."""
    return explain_parts(line.components, None)


def explain_parts(components: Components, cosine: float | None) -> dict[str, float | None]:
    parts = dataclasses.asdict(components)
    names = [*SCORE_PARTS, *(name for name in parts if name not in SCORE_PARTS)]
    explained: dict[str, float | None] = {
        name: None if parts.get(name) is None else round(parts[name], 4) for name in names
    }
    explained["cosine"] = None if cosine is None else round(cosine, 4)
    return explained


class RecallQuery(BaseModel):
    """One line of `persyn memory recall --queries FILE`. Types are strict: a number is not
    a channel, a string is not a list of participants, null is not a query."""

    model_config = ConfigDict(frozen=True, strict=True, str_strip_whitespace=True)

    id: str | int
    query: str = Field(min_length=1)
    channel: str | None = Field(default=None, min_length=1)
    participants: list[str] | None = None
    now: datetime | None = None


_MAX_QUERY_LINE_BYTES = 1 << 20


def read_queries(path: Path) -> list[RecallQuery]:
    """Every line of a batch-recall file, checked before any is run: a bad line is an
    InputError naming the file, the line and the field."""
    queries: list[RecallQuery] = []
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    with handle:
        number = 0
        while chunk := handle.readline(_MAX_QUERY_LINE_BYTES + 1):
            number += 1
            where = f"{path}:{number}"
            if len(chunk) > _MAX_QUERY_LINE_BYTES and not chunk.endswith(b"\n"):
                raise InputError(f"{where}: line is longer than {_MAX_QUERY_LINE_BYTES} bytes")
            try:
                line = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where}: not valid UTF-8 (bad byte at position {exc.start})") from exc
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise InputError(f"{where}: not JSON ({getattr(exc, 'msg', exc)})") from exc
            if not isinstance(item, dict):
                raise InputError(f"{where}: expected a JSON object with 'id' and 'query'")
            queries.append(_recall_query(where, item))
    return queries


def _recall_query(where: str, item: dict[str, object]) -> RecallQuery:
    raw_now = item.get("now")
    if raw_now is not None:
        if not isinstance(raw_now, str):
            raise InputError(f"{where}: now: expected an ISO 8601 string, got {raw_now!r}")
        try:
            parsed = datetime.fromisoformat(raw_now)
        except ValueError as exc:
            raise InputError(f"{where}: now: {raw_now!r} is not ISO 8601 (e.g. 2026-11-30T09:00)") from exc
        item = {**item, "now": parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)}
    try:
        return RecallQuery.model_validate({k: v for k, v in item.items() if k in RecallQuery.model_fields})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("str", "int"))) or "line"
        got = f", got {first['input']!r}" if first["type"] != "missing" else ""
        raise InputError(f"{where}: {field}: {first['msg']}{got}") from exc


# extraction over imported dialog (opt-in) ------------------------------------------------
# A graph or observation call sends its instruction and the transcript and returns a short
# structured answer; this much on top of the transcript keeps the estimate above what
# `test:echo` and hosted models were seen to use.
_CALL_OVERHEAD_TOKENS = 1_500
_EXTRACTION_HOOKS = ("graph", "observe")


@dataclass(frozen=True)
class ExtractionEstimate:
    conversations: int
    calls: int
    tokens: int
    per_conversation: dict[str, int]  # conversation id -> estimated tokens


@dataclass(frozen=True)
class ExtractionReport:
    extracted: int
    tokens: int
    stopped: str | None  # why not every conversation was read (the budget), or None


async def estimate_extraction(
    store: Store, settings: Settings, agent: AgentConfig, conversation_ids: Sequence[str]
) -> ExtractionEstimate:
    """What extracting the graph and observations from these conversations would cost:
    ≈ chars/4 of each transcript plus a fixed overhead, once per extraction call, and one
    dossier refresh per participant after new observations."""
    hooks = [h for h in _EXTRACTION_HOOKS if h != "graph" or settings.graph.enabled]
    per: dict[str, int] = {}
    calls = 0
    for conversation_id in dict.fromkeys(conversation_ids):
        said = await store.recent_messages(agent.id, conversation_id, 100_000)
        if not said:
            continue
        conversation = await store.get_conversation(agent.id, conversation_id)
        people = 0 if conversation is None else len(conversation.participant_ids)
        transcript = sum(len(m.text) + len(m.speaker_name) + 24 for m in said) // 4
        per[conversation_id] = (
            len(hooks) * (transcript + _CALL_OVERHEAD_TOKENS) + people * _CALL_OVERHEAD_TOKENS
        )
        calls += len(hooks) + people
    return ExtractionEstimate(len(per), calls, sum(per.values()), per)


class _TokenCount:
    """A meter adapter that adds up the tokens of every model call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tokens = 0

    def handle(self, record: UsageRecord) -> None:
        with self._lock:
            self.tokens += record.input_tokens + record.output_tokens

    def close(self) -> None:
        return None


async def extract_imported(
    settings: Settings,
    agent: AgentConfig,
    estimate: ExtractionEstimate,
    budget_tokens: int,
    progress: Callable[[int, int], None] | None = None,
) -> ExtractionReport:
    """Run the graph and observation hooks the runtime runs when a conversation closes, on
    imported conversations, one at a time, metered as every model call is. Before each, the
    tokens spent so far plus its estimate must fit `budget_tokens`; otherwise it stops
    cleanly there (a later run, with more budget, reads what is left: the extractors keep
    watermarks, so nothing is read twice)."""
    from persyn.runtime.compose import build_runtime  # the composition root, only for this opt-in step

    counter = _TokenCount()
    runtime = build_runtime(settings, meter_adapters=[counter])
    extracted, stopped = 0, None
    await runtime.start(workers=False, scheduler=False)
    try:
        hooks = [h for h in runtime.jobs.conversation_hook_names() if h in _EXTRACTION_HOOKS]
        for conversation_id, cost in estimate.per_conversation.items():
            runtime.meter.flush()
            if counter.tokens + cost > budget_tokens:
                stopped = (
                    f"the budget of {budget_tokens} tokens would be exceeded: {counter.tokens} spent, "
                    f"the next conversation is estimated at {cost}"
                )
                break
            with bind(
                Attribution(
                    agent_id=agent.id,
                    surface=_IMPORT_SERVICE,
                    conversation_id=conversation_id,
                    trigger="import",
                )
            ):
                for hook in hooks:
                    await runtime.jobs.run_conversation_hook(agent.id, conversation_id, hook)
            extracted += 1
            if progress is not None:
                progress(extracted, estimate.conversations)
        runtime.meter.flush()
    finally:
        await runtime.stop()
    return ExtractionReport(extracted, counter.tokens, stopped)
