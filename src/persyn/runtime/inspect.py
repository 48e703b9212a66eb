"""Read-only views of an agent's stored history, for the CLI (no workers needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import parse_id
from persyn.store import Store, open_store
from persyn.store.base import Conversation, Message

__all__ = ["conversation_dialog", "list_conversations", "opened_store"]

_DIALOG_LIMIT = 100_000


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    store = open_store(settings.database_url)
    await store.setup()
    try:
        yield store
    finally:
        await store.close()


async def list_conversations(
    settings: Settings, agent: AgentConfig, channel: str | None, limit: int
) -> list[Conversation]:
    async with opened_store(settings) as store:
        return await store.list_conversations(agent.id, channel=channel, limit=limit)


async def conversation_dialog(
    settings: Settings, agent: AgentConfig, conversation_id: str
) -> tuple[Conversation, list[Message]]:
    wanted = parse_id(conversation_id, what="conversation id")
    async with opened_store(settings) as store:
        conversation = await store.get_conversation(agent.id, wanted)
        if conversation is None:
            raise InputError(f"agent {agent.name} has no conversation {wanted!r}")
        return conversation, await store.recent_messages(agent.id, wanted, _DIALOG_LIMIT)
