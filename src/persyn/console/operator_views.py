"""What the console's panels read and change: the CLI's own operator functions
(`ops/history.py`, `ops/autonomy.py`, `usage/ledger.py`), bound to one
deployment and agent. The console adds no second copy of any of them: a rename, a merge
or an identity change here is the `persyn contacts` command's, store and checks included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from persyn.core.config import AgentConfig, Settings
from persyn.ops import autonomy as autonomy
from persyn.ops import history as directory
from persyn.store.base import Conversation, Goal, Identity, Message, Person, Reminder
from persyn.usage.ledger import LedgerReport, summarize

__all__ = ["Operator"]


class Operator:
    def __init__(self, settings: Settings, agent: AgentConfig, now: Callable[[], datetime]) -> None:
        self.settings = settings
        self.agent = agent
        self.now = now

    # directory ----------------------------------------------------------------------------
    async def contacts(self) -> list[directory.Contact]:
        return await directory.contacts(self.settings, self.agent)

    async def contact(self, who: str) -> directory.ContactDigest:
        return await directory.contact(self.settings, self.agent, who)

    async def rename(self, who: str, name: str) -> Person:
        return await directory.rename_contact(self.settings, self.agent, who, name)

    async def merge(self, survivor: str, other: str, name: str | None) -> Person:
        return await directory.merge_contacts(self.settings, self.agent, survivor, other, name)

    async def identity(self, who: str, identity: Identity, *, attach: bool) -> Person:
        return await directory.change_identity(self.settings, self.agent, who, identity, attach=attach)

    async def address(self, who: str, label: str, value: str, *, add: bool) -> tuple[Person, bool]:
        return await directory.change_address(
            self.settings, self.agent, who, label, value, add=add, now=self.now()
        )

    async def prefer(self, who: str, channel: str) -> Person:
        return await directory.prefer_channel(self.settings, self.agent, who, channel)

    async def dialog(
        self, conversation_id: str, *, deliberation: bool = False
    ) -> tuple[Conversation, list[Message], dict[str, dict[str, Any]]]:
        return await directory.conversation_dialog(
            self.settings, self.agent, conversation_id, deliberation=deliberation
        )

    # channels -----------------------------------------------------------------------------
    async def channels(self) -> list[directory.ChannelDigest]:
        return await directory.channels(self.settings, self.agent)

    async def channel(self, name: str) -> directory.ChannelDigest:
        return await directory.channel(self.settings, self.agent, name)

    # mind -----------------------------------------------------------------------------------
    async def goals(self) -> list[Goal]:
        return await autonomy.agent_goals(self.settings, self.agent)

    async def reminders(self) -> list[Reminder]:
        return await autonomy.agent_reminders(self.settings, self.agent, include_cancelled=False)

    async def heartbeat(self) -> autonomy.HeartbeatView:
        return await autonomy.heartbeat(self.settings, self.agent, self.now(), limit=8)

    async def turns(self, service: str, channel: str, limit: int) -> list[directory.Turn]:
        return await directory.recent_turns(self.settings, self.agent, service, channel, limit)

    async def sleep(self) -> bool:
        return await autonomy.sleep(self.settings, self.agent)

    async def wake(self) -> Reminder:
        return await autonomy.wake(self.settings, self.agent, self.now())

    # usage ----------------------------------------------------------------------------------
    async def usage(self, by: str, since: datetime) -> LedgerReport:
        return await asyncio.to_thread(
            summarize, self.settings.usage_log_path, by=by, since=since, agent_id=self.agent.id
        )

    def today(self) -> datetime:
        """Local midnight of the operator's day, as an aware time."""
        local = self.now().astimezone()
        return local.replace(hour=0, minute=0, second=0, microsecond=0)

    def hour_ago(self) -> datetime:
        return self.now() - timedelta(hours=1)
