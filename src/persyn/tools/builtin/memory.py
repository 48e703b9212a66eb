"""Searching memory and remembering harder (SPEC §4.1, §4.6).

- `search_memories`: the agent's long-term records, by keyword, regular expression, tags
  and date range;
- `search_dialog`: the verbatim dialog kept for the retention window, by keyword, regular
  expression and date range;
- `recall_dialog`: the raw exchange a record was formed from ("remember harder").

**Compartments.** The tools are bound to the situation of one activation — the current
channel, the people present, `[memory] channel_groups` — and withhold exactly what
retrieval withholds: a record is shown only when `memory.access.may_surface` allows it,
and `recall_dialog` only opens a record that may surface, and only shows its dialog where
`search_dialog` would (the rule below). Verbatim dialog carries no
sensitivity of its own, and the records later formed from a conversation may have been
raised above the channel's default; so a conversation's dialog is treated as a record of
that conversation (its channel, its participants) at `dialog_sensitivity`, `restricted`
by default: only dialog from this channel, among exactly the people present now, which can
never show what any record formed from it would withhold. A deployment may lower it (e.g.
to `private`) to let dialog search cross a channel group.

**Bounds.** Every search looks at a bounded candidate set and says when it hit the bound:
- with a keyword, the store's full-text index gives the best `_CANDIDATES` matches (records:
  any word, in the compartment; dialog: every word), then the other filters apply;
- without one, records are read newest first from the end of the date range, at most
  `_SCAN_RECORDS` of them (all channels: the store lists records without a channel filter),
  and dialog is the latest `_SCAN_MESSAGES` messages of each channel in the compartment;
- `recall_dialog` reads the latest `_RECALL_SCAN` messages of the record's conversation and
  keeps the record's own (the store has no fetch of messages by id).
A regular expression is matched case-insensitively in a child process with a deadline
(`tools/builtin/_regex.py`), so a runaway pattern cannot stall the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from ulid import ULID

from persyn.core.errors import ToolError
from persyn.core.ids import is_id, parse_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory.access import eligible_channels, may_surface
from persyn.store.base import Conversation, Message
from persyn.store.capabilities import MemoryStore, capability
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.tools.builtin._regex import MAX_PATTERN_CHARS, compile_pattern, matching
from persyn.tools.registry import Tool

__all__ = [
    "DialogHit",
    "DialogLine",
    "MemoryHit",
    "MemoryToolsContext",
    "memory_tools",
]

_CANDIDATES = 200
_SCAN_RECORDS = 1000
_SCAN_MESSAGES = 500
_RECALL_SCAN = 2000  # messages of a conversation read to find a record's own
_PAGE = 200
_SNIPPET = 240
_LINE = 500
_MAX_ULID_SECONDS = (2**48 - 1) / 1000

T = TypeVar("T")


@dataclass(frozen=True)
class MemoryToolsContext:
    store: MemoryStore
    agent_id: str
    channel: str  # the current channel key, "service:channel"
    present: tuple[str, ...]  # who can read the current channel now (the agent's id is ignored)
    channel_groups: Sequence[Sequence[str]] = ()
    dialog_sensitivity: Sensitivity = Sensitivity.RESTRICTED
    # Told each time recall_dialog reads the dialog behind a memory (and how many lines): the
    # provider logs it in the activity log, where the operator sees the agent remember harder.
    remembered: Callable[[MemoryRecord, int], Awaitable[None]] | None = None


# what the model sees -------------------------------------------------------------------------
class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True)


_SINCE = "From this time on, ISO 8601, e.g. '2026-11-01' (UTC if no zone)."
_UNTIL = "Up to this time, ISO 8601."
_REGEX = "A regular expression to match (case-insensitive)."


class _Search(_Input):
    keyword: str | None = Field(default=None, max_length=200, description="Words to look for.")
    regex: str | None = Field(default=None, max_length=MAX_PATTERN_CHARS, description=_REGEX)
    since: datetime | None = Field(default=None, description=_SINCE)
    until: datetime | None = Field(default=None, description=_UNTIL)
    limit: int = Field(default=10, ge=1, le=30, description="At most this many results.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.since is not None and self.until is not None and _utc(self.until) < _utc(self.since):
            raise ValueError("until is before since")
        return self


class SearchMemoriesInput(_Search):
    tags: list[str] = Field(
        default_factory=list[str], max_length=10, description="Tags every result must carry, e.g. ['tea']."
    )


class SearchDialogInput(_Search):
    pass


class RecallDialogInput(_Input):
    memory_id: str = Field(description="The memory's id, as search_memories or your context shows it.")
    offset: int = Field(default=0, ge=0, description="Skip this many messages (to read on).")
    limit: int = Field(default=10, ge=1, le=30, description="At most this many messages.")


class MemoryHit(_Output):
    id: str
    at: str = Field(description="When it happened (UTC).")
    channel: str
    kind: str
    importance: int
    tags: list[str]
    summary: str
    conversation_id: str | None = None


class MemorySearch(_Output):
    memories: list[MemoryHit]
    note: str | None = None


class DialogHit(_Output):
    id: str
    at: str
    channel: str
    conversation_id: str
    speaker: str
    text: str


class DialogSearch(_Output):
    messages: list[DialogHit]
    note: str | None = None


class DialogLine(_Output):
    id: str
    at: str
    speaker: str
    text: str


class RecalledDialog(_Output):
    memory_id: str
    summary: str
    channel: str
    conversation_id: str
    total: int = Field(description="Messages behind this memory that are still kept.")
    offset: int
    messages: list[DialogLine]


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _in_range(when: datetime, since: datetime | None, until: datetime | None) -> bool:
    at = _utc(when)
    return (since is None or at >= _utc(since)) and (until is None or at <= _utc(until))


def _before_id(until: datetime) -> str:
    """The smallest ULID of the millisecond after `until`: `list_records(before_id=...)`
    then starts with the newest record formed at or before it."""
    seconds = min(max(_utc(until).timestamp() + 0.001, 0.0), _MAX_ULID_SECONDS)
    return str(ULID.from_timestamp(seconds))[:10] + "0" * 16


async def _regex_filter(pattern: str | None, items: list[T], text_of: Callable[[T], str]) -> list[T]:
    if pattern is None or not items:
        return items
    found = await matching(pattern, [text_of(item) for item in items])
    return [item for item, hit in zip(items, found, strict=True) if hit]


# the tools -------------------------------------------------------------------------------------
def memory_tools(context: MemoryToolsContext) -> list[Tool[Any, Any]]:
    """search_memories, search_dialog and recall_dialog, bound to `context`."""
    store, agent_id = context.store, context.agent_id
    # Keyword search of dialog; a store without dialog history (`store/capabilities.py`) has none.
    history = capability(store, DialogHistoryPort)
    groups = [list(group) for group in context.channel_groups]
    channels = eligible_channels(context.channel, groups)

    def surfaces(record: MemoryRecord) -> bool:
        return may_surface(record, context.channel, context.present, groups, agent_id=agent_id)

    def dialog_surfaces(conversation: Conversation) -> bool:
        # The conversation's dialog as a record of it at `dialog_sensitivity` (module docstring).
        as_record = MemoryRecord(
            id=conversation.id,
            agent_id=agent_id,
            created_at=conversation.started_at,
            channel=f"{conversation.service}:{conversation.channel}",
            participant_ids=conversation.participant_ids,
            summary="",
            sensitivity=context.dialog_sensitivity,
        )
        return surfaces(as_record)

    def check(arguments: _Search) -> None:
        if arguments.keyword is not None and not any(ch.isalnum() for ch in arguments.keyword):
            raise ToolError(f"the keyword {arguments.keyword!r} has no words to search for")
        if arguments.regex is not None:
            compile_pattern(arguments.regex)

    async def search_memories(arguments: SearchMemoriesInput) -> MemorySearch:
        check(arguments)
        since, until = arguments.since, arguments.until
        wanted_tags = {" ".join(t.split()).casefold() for t in arguments.tags if t.strip()}
        note = None
        if arguments.keyword is not None:
            scored = await store.keyword_candidates(agent_id, arguments.keyword, _CANDIDATES, channels)
            by_id = {r.id: r for r in await store.records_by_ids(agent_id, [rid for rid, _ in scored])}
            candidates = [by_id[rid] for rid, _ in scored if rid in by_id]
            if len(scored) >= _CANDIDATES:
                note = f"only the {_CANDIDATES} best keyword matches were searched"
        else:
            candidates, exhausted = await scan_records(since, until)
            if not exhausted:
                note = f"only the {_SCAN_RECORDS} newest memories in the date range were searched; narrow it"
        chosen = [
            r
            for r in candidates
            if r.channel in channels
            and _in_range(r.created_at, since, until)
            and wanted_tags <= {t.casefold() for t in r.tags}
            and surfaces(r)
        ]
        chosen = await _regex_filter(arguments.regex, chosen, lambda r: f"{r.summary}\n{' '.join(r.tags)}")
        return MemorySearch(
            memories=[
                MemoryHit(
                    id=r.id,
                    at=_utc(r.created_at).isoformat(),
                    channel=r.channel,
                    kind=r.kind,
                    importance=r.importance,
                    tags=list(r.tags),
                    summary=_cut(r.summary, _SNIPPET * 2),
                    conversation_id=r.conversation_id,
                )
                for r in chosen[: arguments.limit]
            ],
            note=note,
        )

    async def scan_records(since: datetime | None, until: datetime | None) -> tuple[list[MemoryRecord], bool]:
        """Records newest first from `until` back to `since`; whether the range was exhausted."""
        found: list[MemoryRecord] = []
        before = None if until is None else _before_id(until)
        while len(found) < _SCAN_RECORDS:
            page = await store.list_records(
                agent_id, limit=min(_PAGE, _SCAN_RECORDS - len(found)), before_id=before
            )
            found += page
            if not page or (since is not None and _utc(page[-1].created_at) < _utc(since)):
                return found, True
            before = page[-1].id
        return found, False

    async def search_dialog(arguments: SearchDialogInput) -> DialogSearch:
        check(arguments)
        since, until = arguments.since, arguments.until
        note = None
        if arguments.keyword is not None:
            if history is None:
                raise ToolError(
                    "keyword search of past dialog is not available here (the store keeps no "
                    "dialog history); search without a keyword, by date or regex"
                )
            candidates = await history.search_messages(
                agent_id,
                arguments.keyword,
                since=None if since is None else _utc(since),
                until=None if until is None else _utc(until),
                limit=_CANDIDATES,
            )
            if len(candidates) >= _CANDIDATES:
                note = f"only the {_CANDIDATES} best keyword matches were searched"
        else:
            candidates = []
            for key in channels:
                service, _, channel = key.partition(":")
                latest = await store.channel_messages(agent_id, service, channel, _SCAN_MESSAGES)
                if len(latest) >= _SCAN_MESSAGES and (
                    since is None or _utc(latest[0].created_at) > _utc(since)
                ):
                    note = (
                        f"without a keyword only the latest {_SCAN_MESSAGES} messages of each "
                        "channel were searched; give a keyword to reach further back"
                    )
                candidates += latest
            candidates.sort(key=lambda m: (_utc(m.created_at), m.id), reverse=True)
        conversations: dict[str, Conversation | None] = {}
        chosen: list[tuple[Message, Conversation]] = []
        for message in candidates:
            if not _in_range(message.created_at, since, until):
                continue
            if message.conversation_id not in conversations:
                conversations[message.conversation_id] = await store.get_conversation(
                    agent_id, message.conversation_id
                )
            conversation = conversations[message.conversation_id]
            if conversation is not None and dialog_surfaces(conversation):
                chosen.append((message, conversation))
        chosen = await _regex_filter(arguments.regex, chosen, lambda pair: pair[0].text)
        return DialogSearch(
            messages=[
                DialogHit(
                    id=m.id,
                    at=_utc(m.created_at).isoformat(),
                    channel=f"{c.service}:{c.channel}",
                    conversation_id=c.id,
                    speaker=m.speaker_name,
                    text=_cut(m.text, _SNIPPET),
                )
                for m, c in chosen[: arguments.limit]
            ],
            note=note,
        )

    async def recall_dialog(arguments: RecallDialogInput) -> RecalledDialog:
        record = None
        if is_id(arguments.memory_id):
            record = await store.get_record(agent_id, parse_id(arguments.memory_id))
        # One answer for "no such memory" and "not to be brought up here": no existence leak.
        if record is None or not surfaces(record):
            raise ToolError(f"you have no memory {arguments.memory_id!r} you can recall here")
        if record.conversation_id is None:
            raise ToolError(
                f"memory {record.id} has no dialog behind it (it was not formed in a conversation)"
            )
        # The words themselves pass the dialog rule, as in search_dialog: a record may surface
        # where the conversation it was formed from may not be quoted.
        conversation = await store.get_conversation(agent_id, record.conversation_id)
        if conversation is None or not dialog_surfaces(conversation):
            raise ToolError(
                f"the words behind memory {record.id} may not be repeated here; its summary is all "
                "you can use"
            )
        dialog = await store.recent_messages(agent_id, record.conversation_id, _RECALL_SCAN)
        scanned_all = len(dialog) < _RECALL_SCAN
        if record.message_ids:
            own = set(record.message_ids)
            dialog = [m for m in dialog if m.id in own]
        if not dialog and not scanned_all:
            raise ToolError(
                f"the dialog behind memory {record.id} lies before the latest {_RECALL_SCAN} "
                "messages of its conversation, further back than this tool reads; search_dialog "
                "with a keyword and a date range may find it"
            )
        if not dialog:
            raise ToolError(
                f"the dialog behind memory {record.id} is no longer kept (verbatim dialog is "
                "deleted after the retention window); its summary is all there is"
            )
        window = dialog[arguments.offset : arguments.offset + arguments.limit]
        if context.remembered is not None:
            await context.remembered(record, len(window))
        return RecalledDialog(
            memory_id=record.id,
            summary=record.summary,
            channel=record.channel,
            conversation_id=record.conversation_id,
            total=len(dialog),
            offset=arguments.offset,
            messages=[
                DialogLine(
                    id=m.id,
                    at=_utc(m.created_at).isoformat(),
                    speaker=m.speaker_name,
                    text=_cut(m.text, _LINE),
                )
                for m in window
            ],
        )

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="search_memories",
            description=(
                "Search your long-term memories by keyword, regex, tags and/or dates (since, "
                "until); no keyword = newest first. Results have ids for recall_dialog."
            ),
            input_model=SearchMemoriesInput,
            output_model=MemorySearch,
            handler=search_memories,
        ),
        Tool(
            name="search_dialog",
            description=(
                "Search the exact words of past conversations (kept for a while, then only "
                "memories remain): by keyword, regex and/or a date range, for a quote, a "
                "number, a name or a detail a summary would lose."
            ),
            input_model=SearchDialogInput,
            output_model=DialogSearch,
            handler=search_dialog,
        ),
        Tool(
            name="recall_dialog",
            description=(
                "Remember harder: read the actual conversation a memory was formed from, by "
                "the memory's id, when its summary is too vague; page with offset."
            ),
            input_model=RecallDialogInput,
            output_model=RecalledDialog,
            handler=recall_dialog,
        ),
    ]
    return tools
