"""The dialog sub-ports (SPEC §4.1): conversations and their messages as a turn reads and
writes them (`DialogPort`, part of `Store`), and listing, closing, full-text search and
purging beyond a turn (`DialogHistoryPort`, a capability)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from persyn.store.rows import AgentId, Row, ulid

__all__ = [
    "Conversation",
    "ConversationId",
    "DialogHistoryPort",
    "DialogHit",
    "DialogPort",
    "Message",
    "PersonId",
    "Role",
]


class Role(StrEnum):
    USER = "user"  # someone else speaking (a person, another agent)
    AGENT = "agent"  # this agent speaking
    SYSTEM = "system"  # reminders, heartbeat objectives, notices folded into dialog


ConversationId = Annotated[str, ulid("conversation id")]
PersonId = Annotated[str, ulid("person id")]


class Conversation(Row):
    id: ConversationId
    agent_id: AgentId
    service: str
    channel: str
    participant_ids: tuple[Annotated[str, ulid("participant id")], ...]
    started_at: datetime
    last_activity_at: datetime
    closed_at: datetime | None
    kind: str = "dialog"  # "dialog" | "reflection"


class Message(Row):
    """One line of dialog. Its ids are checked as it is built (`rows.ulid`), whatever
    backend stores it; backends read stored rows back unchecked (`model_construct`)."""

    id: Annotated[str, ulid("message id")]
    agent_id: AgentId
    conversation_id: ConversationId
    role: Role
    person_id: PersonId | None  # None for the agent itself
    speaker_name: str
    text: str
    created_at: datetime
    event_id: Annotated[str, ulid("event id")] | None


class DialogHit(Row):
    """A message found by `DialogHistoryPort.rank_messages`, with the conversation it was
    said in (its channel and participants decide where it may be repeated, as a memory's
    would: `memory/access.py`) and its keyword score (higher is better; only the order
    within one search means anything)."""

    message: Message
    conversation: Conversation
    score: float


class DialogPort(ABC):
    """Conversations and what was said in them, as far as a turn needs them; part of `Store`."""

    @abstractmethod
    async def open_conversation(
        self,
        agent_id: str,
        service: str,
        channel: str,
        participant_ids: Sequence[str],
        now: datetime,
        idle_timeout_seconds: float,
        kind: str = "dialog",
    ) -> Conversation:
        """The open conversation on this channel, or a new one. A conversation idle longer
        than the timeout is closed first. New participants are added to an open one.
        Touches last activity."""

    @abstractmethod
    async def get_conversation(self, agent_id: str, conversation_id: str) -> Conversation | None: ...

    @abstractmethod
    async def close_idle_conversations(
        self, agent_id: str | None, now: datetime, idle_timeout_seconds: float
    ) -> list[Conversation]:
        """Close every open conversation idle longer than the timeout; return those closed."""

    @abstractmethod
    async def add_message(self, message: Message) -> bool:
        """Store a message. Idempotent: a message whose (event_id, role) already exists for
        an AGENT reply, or whose id exists, is not stored twice; returns False then."""

    @abstractmethod
    async def recent_messages(self, agent_id: str, conversation_id: str, limit: int) -> list[Message]:
        """The last `limit` messages of a conversation, oldest first."""

    @abstractmethod
    async def turn_messages(
        self, agent_id: str, conversation_id: str, input_message_id: str, limit: int
    ) -> list[Message]:
        """The dialog a turn reads: the last `limit` messages of its conversation, oldest
        first by (created_at, id), always including the turn's input `input_message_id` —
        however many messages were stored after it while it waited in the queue. Nothing
        of any other conversation (recent dialog is the current conversation only; earlier
        ones reach a prompt only as memories, through `memory.access`)."""

    @abstractmethod
    async def channel_messages(self, agent_id: str, service: str, channel: str, limit: int) -> list[Message]:
        """The last `limit` messages on a channel across conversations, oldest first.
        Never for a prompt: it crosses conversations (see `turn_messages`)."""

    @abstractmethod
    async def agent_reply_for_event(self, agent_id: str, event_id: str) -> Message | None: ...


class DialogHistoryPort(ABC):
    """Conversations beyond the ones a turn is in: listing, closing one now, searching and
    purging dialog. The "dialog history" capability (`store/capabilities.py`)."""

    @abstractmethod
    async def list_conversations(
        self, agent_id: str, *, channel: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Newest first."""

    @abstractmethod
    async def person_conversations(self, agent_id: str, person_id: str, limit: int) -> list[Conversation]:
        """The `limit` latest conversations (by start, newest first) a person took part in,
        from the participant index: the cost grows with `limit`, not with their history."""

    @abstractmethod
    async def close_conversation(
        self, agent_id: str, conversation_id: str, now: datetime
    ) -> Conversation | None:
        """Close one conversation now (a self-initiated run is one conversation); None if it
        does not exist or was already closed — so its close hooks are enqueued only once."""

    @abstractmethod
    async def search_messages(
        self,
        agent_id: str,
        query: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 20,
    ) -> list[Message]:
        """Full-text (FTS5 / tsvector) keyword search over dialog, best match first."""

    @abstractmethod
    async def rank_messages(
        self, agent_id: str, query: str, *, channels: Sequence[str], limit: int = 20
    ) -> list[DialogHit]:
        """Raw dialog for recall (SPEC §4.2 "check the raw record"): what people and the
        agent said (roles user and agent, dialog conversations) on any of `channels`
        (`channel_key`s), matching ANY of the query's content words (`sql.search.
        fts_any_words`, stop words dropped), best keyword score first (bm25 on SQLite,
        `ts_rank` on PostgreSQL), newer first on ties. Unlike `search_messages` (every word,
        for the agent's deliberate search) one shared word is enough: recall ranks."""

    @abstractmethod
    async def count_messages(self, agent_id: str) -> int: ...

    @abstractmethod
    async def purge_dialog(self, agent_id: str, before: datetime) -> int:
        """Delete verbatim dialog older than `before` in conversations closed before it (the
        retention window of SPEC §4.1); memory records stay. Returns messages deleted."""

    @abstractmethod
    async def forget_messages(self, agent_id: str, message_ids: Sequence[str]) -> int:
        """Delete these messages of the agent's dialog: the verbatim words a forgotten memory
        was made from (`persyn memory forget`), so raw-dialog recall cannot bring back what
        the memory no longer says. Unknown ids are ignored. Returns messages deleted."""

    @abstractmethod
    async def held_attachments(self, agent_id: str) -> set[str]:
        """The `att-…` references of the agent's events that something still holds: a dialog
        message of the event (retained dialog), or a memory record whose `message_ids` name
        the event's input message (`core.events.inbound_message_id`, so a memory holds its
        originals past the dialog purge). An original not among them is free to sweep
        (`senses.library.AttachmentLibrary.sweep`, after a grace period)."""
