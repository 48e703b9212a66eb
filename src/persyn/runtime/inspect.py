"""Read-only views of an agent's stored history, for the CLI (no workers needed)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import parse_id
from persyn.store import Store, open_store
from persyn.store.base import Conversation, Message

__all__ = ["conversation_dialog", "deliberation_traces", "list_conversations", "opened_store"]

# The same key the runtime writes (runtime/app.py DELIBERATION_FLAG); app is not imported
# here because it pulls in DBOS and every provider.
_DELIBERATION_FLAG = "deliberation:"

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


async def deliberation_traces(
    settings: Settings, agent: AgentConfig, event_ids: list[str]
) -> dict[str, dict[str, Any]]:
    """What deliberation did per event: critics (objections or why skipped), the decision."""
    traces: dict[str, dict[str, Any]] = {}
    async with opened_store(settings) as store:
        for event_id in event_ids:
            raw = await store.get_flag(agent.id, _DELIBERATION_FLAG + event_id)
            if raw:
                with contextlib.suppress(ValueError):
                    traces[event_id] = json.loads(raw)
    return traces
