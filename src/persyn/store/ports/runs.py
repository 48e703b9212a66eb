"""The runs sub-port (SPEC §4.5, §4.7; ARCHITECTURE §4): what each activation's run has done
so far, what caused each self-initiated conversation, and the per-channel ledgers of what the
agent said there — with their row types.

They were flag prefixes (`spend:`, `run-provenance:`, `sends:`, `run:`, `sent:`, `replied:`)
until migration 14 moved them here: a run's state is one row updated by compare-and-set, and a
channel's budget is a ledger of entries read over a rolling window, not a JSON list rewritten
on every reply. Nothing purged the flags; `purge_runs` drops rows past their keeping time
(`[autonomy] run_keep_days`, by the housekeeping).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from persyn.core.records import Sensitivity
from persyn.store.rows import AgentId, Provenance, Row, ulid

__all__ = [
    "MAX_STOP_CHARS",
    "ChannelEntry",
    "ChannelSpend",
    "RunConversation",
    "RunState",
    "RunsPort",
    "SpendKind",
]

MAX_STOP_CHARS = 2000
_RunId = Annotated[str, ulid("run id")]


class RunState(Row):
    """What the run of one activation (keyed by its event id) has done so far: the tokens a
    self-initiated run spent and why the autonomy budget stopped it, the provenance of what
    it writes (None: never recorded), and the tool-call keys of the messages it sent to
    contacts (the per-run cap counts them; a re-run call is already among them)."""

    agent_id: AgentId
    run_id: _RunId
    tokens: int = Field(default=0, ge=0)
    stopped: str | None = Field(default=None, max_length=MAX_STOP_CHARS)
    provenance: Provenance | None = None
    sends: tuple[str, ...] = ()
    updated_at: datetime


class RunConversation(Row):
    """What caused a self-initiated conversation, recorded when its run finishes: the run's
    kind and reminder (its memory is tagged by them) and the sensitivity of what it read (its
    memory is at least as sensitive)."""

    agent_id: AgentId
    conversation_id: Annotated[str, ulid("conversation id")]
    run_id: _RunId
    kind: str = Field(min_length=1, max_length=32)
    reminder_id: str = Field(default="", max_length=26)
    sensitivity: Sensitivity
    created_at: datetime


class SpendKind(StrEnum):
    SENT = "sent"  # what the agent initiated on a channel (`[autonomy] channel_message_tokens`)
    REPLIED = "replied"  # its replies there (`[autonomy] channel_reply_tokens`)


@dataclass(frozen=True)
class ChannelEntry:
    """An entry for a channel's ledger (`spend_channel`): `tokens` of `kind` under `key`,
    read against what was spent there since `since`."""

    kind: SpendKind
    service: str
    channel: str
    key: str
    tokens: int
    since: datetime


class ChannelSpend(Row):
    """The outcome of `spend_channel`: the tokens spent in the window before this entry, and
    whether the entry is recorded (False: it would have passed the limit)."""

    used: int
    recorded: bool


class RunsPort(ABC):
    """Run state, run conversations and channel ledgers."""

    @abstractmethod
    async def get_run(self, agent_id: str, run_id: str) -> RunState | None: ...

    @abstractmethod
    async def update_run(
        self, agent_id: str, run_id: str, change: Callable[[RunState], RunState], now: datetime
    ) -> RunState:
        """Compare-and-set in one transaction: `change` gets the stored state (a fresh one if
        none) and returns the new one, stored with `updated_at = now`. If it raises, nothing
        is written and the exception propagates (the per-run send cap refuses this way)."""

    @abstractmethod
    async def set_run_conversation(self, row: RunConversation) -> None:
        """Record (or replace) what caused `row.conversation_id`."""

    @abstractmethod
    async def get_run_conversation(self, agent_id: str, conversation_id: str) -> RunConversation | None: ...

    @abstractmethod
    async def spend_channel(
        self,
        agent_id: str,
        kind: SpendKind,
        service: str,
        channel: str,
        key: str,
        tokens: int,
        at: datetime,
        *,
        since: datetime,
        limit: int | None = None,
    ) -> ChannelSpend:
        """In one transaction: the tokens of `kind` on the channel since `since`, then the entry
        `key` recorded unless that would pass `limit`. An entry under a `key` already recorded
        is not recorded twice (a re-run step counts once)."""

    @abstractmethod
    async def channel_spent(
        self, agent_id: str, kind: SpendKind, service: str, channel: str, since: datetime
    ) -> int:
        """Tokens of `kind` on the channel recorded after `since`."""

    @abstractmethod
    async def purge_runs(self, before: datetime) -> int:
        """Drop run states not updated, run conversations not recorded, and ledger entries
        not made since `before`; return how many rows went."""
