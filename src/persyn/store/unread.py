"""What is new in a conversation since a reader last read it: the one watermark reader the
incremental extractors share (the knowledge graph, observations about people).

Each reader keeps a watermark per conversation (`JobsPort` watermarks: the last message it
read). `unread` returns the messages after it, with a few before it as context only;
`advance` moves it once what was read is safely stored, so a failed model call leaves the
messages to be read on the next run, and nothing is ever read (billed) twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from persyn.store.base import Conversation, Message, Store
from persyn.store.ports.jobs import Watermark

__all__ = ["Unread", "WatermarkReader"]

_MAX_MESSAGES = 200
_CONTEXT_MESSAGES = 4


@dataclass(frozen=True)
class Unread:
    fresh: list[Message]  # after the watermark: to read now
    context: list[Message]  # just before it: already read, shown for continuity


class WatermarkReader:
    """One reader's (`"graph"`, `"observe"`) view of what it has not read yet."""

    def __init__(
        self, store: Store, reader: str, *, window: int = _MAX_MESSAGES, context: int = _CONTEXT_MESSAGES
    ) -> None:
        self.store = store
        self.reader = reader
        self.window = window
        self.context = context

    async def unread(self, agent_id: str, conversation: Conversation) -> Unread:
        messages = await self.store.recent_messages(agent_id, conversation.id, self.window)
        seen = await self.store.get_watermark(agent_id, conversation.id, self.reader)
        start = 0
        if seen:
            start = next((i + 1 for i, m in enumerate(messages) if m.id == seen), 0)
        return Unread(messages[start:], messages[max(0, start - self.context) : start])

    async def advance(self, agent_id: str, conversation_id: str, last: Message) -> None:
        """Everything up to and including `last` has been read."""
        await self.store.set_watermark(
            Watermark(
                agent_id=agent_id,
                conversation_id=conversation_id,
                reader=self.reader,
                message_id=last.id,
                updated_at=datetime.now(UTC),
            )
        )
