"""The storage port (ARCHITECTURE §4). One schema, several backends; every backend passes
the contract, `persyn.testing.store_contract`. Every row carries `agent_id`; every id is a ULID.

`Store` is the required core: what every backend must do for a turn to run — the lifecycle,
`events` (events, completion markers, deliberation traces), `directory` (agents, and who
speaks: `DirectoryPort`), `dialog` (a turn's conversation and its messages: `DialogPort`),
`flags`, `outbox`, `runs` (run state, channel ledgers: cost safety) and the extraction
watermarks (`jobs.WatermarksPort`) — 40 abstract methods. Everything else is a named optional
capability a backend offers by deriving from its port besides `Store` (`store/capabilities.py`:
memory, dialog history, the contact directory, the knowledge graph, reminders and goals,
guardrail and emotion history, artifacts, web keys, channel leases, the activity log,
consolidation jobs, model-call checkpoints); callers detect it and degrade without it (SPEC
§2). One module per concern in `store/ports/`, its row types beside it; code may import a
sub-port's names from its own module, and this module re-exports the row types for the code
that imports them from here.

Methods are async: backends run blocking database work off the event loop, with a single
writer on SQLite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from persyn.core.events import CompletionMarker
from persyn.store.ports.activity import UNATTRIBUTED_RUN, ActivityEntry, ActivityPort
from persyn.store.ports.dialog import Conversation, DialogPort, Message, Role
from persyn.store.ports.directory import AgentRow, ContactAddress, DirectoryPort, Identity, Person
from persyn.store.ports.events import DeliberationTrace, EventsPort
from persyn.store.ports.flags import FlagsPort
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.jobs import WatermarksPort
from persyn.store.ports.memory import (
    ImportedMemory,
    MemoryPort,
    Observation,
    ObservationChange,
    QuickFact,
    RecallCandidate,
    RecallHits,
)
from persyn.store.ports.outbox import OutboxPort, OutboxRow
from persyn.store.ports.runs import ChannelEntry, RunsPort
from persyn.store.ports.schedule import (
    AtTrigger,
    CronTrigger,
    FireResult,
    Goal,
    GoalStatus,
    IntervalTrigger,
    Reminder,
    ReminderAction,
    ReminderStatus,
    SchedulePort,
    Trigger,
)
from persyn.store.rows import GLOBAL, Provenance

__all__ = [
    "GLOBAL",
    "UNATTRIBUTED_RUN",
    "ActivityEntry",
    "ActivityPort",
    "AgentRow",
    "AtTrigger",
    "ContactAddress",
    "Conversation",
    "CronTrigger",
    "DeliberationTrace",
    "DialogPort",
    "DirectoryPort",
    "EventsPort",
    "FireResult",
    "FlagsPort",
    "Goal",
    "GoalStatus",
    "GraphPort",
    "Identity",
    "ImportedMemory",
    "IntervalTrigger",
    "MemoryPort",
    "Message",
    "Observation",
    "ObservationChange",
    "Person",
    "Provenance",
    "QuickFact",
    "RecallCandidate",
    "RecallHits",
    "Reminder",
    "ReminderAction",
    "ReminderStatus",
    "ReplyUpkeep",
    "Role",
    "RunsPort",
    "SchedulePort",
    "Store",
    "Trigger",
]


@dataclass(frozen=True)
class ReplyUpkeep:
    """What transmit writes beside a reply (`Store.record_reply`), so that one transaction
    holds the whole of a spoken turn's bookkeeping: the event's deliberation trace (merged
    key by key, as `merge_deliberation`), the reply's entry in its channel's ledger (as
    `spend_channel`, spent at the reply's time, never limited), the flags it clears (the
    parked conclusions the reply carried) and the flags it changes as `update_flag` does
    (key and change: the records recalled for the turn, added to its conversation's)."""

    trace: Mapping[str, Any] | None = None
    spend: ChannelEntry | None = None
    cleared_flags: tuple[str, ...] = ()
    updated_flags: tuple[tuple[str, Callable[[str | None], str | None]], ...] = ()


class Store(
    EventsPort,
    DirectoryPort,
    DialogPort,
    FlagsPort,
    OutboxPort,
    RunsPort,
    WatermarksPort,
    ABC,
):
    """What every backend must offer (the module docstring): the core sub-ports, the
    lifecycle, and the operations that span them (a backend may do each in one transaction)."""

    # lifecycle -----------------------------------------------------------------------
    @abstractmethod
    async def setup(self) -> None:
        """Create or migrate the schema. Idempotent; safe from several processes."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def schema_version(self) -> int: ...

    # across sub-ports ------------------------------------------------------------------
    async def record_inbound(
        self,
        agent_id: str,
        speaker: tuple[Identity, str, str] | None,
        service: str,
        channel: str,
        now: datetime,
        idle_timeout_seconds: float,
        kind: str,
        make_message: Callable[[Person | None, Conversation], Message],
    ) -> tuple[Person | None, Conversation, Message]:
        """An inbound turn: resolve the speaker (identity, display name, kind) to a person,
        open the channel's conversation of `kind` with them in it, and add the message
        `make_message` builds from both. A backend may do it in one transaction; each part
        is idempotent as its own method is."""
        person = None
        if speaker is not None:
            identity, display_name, person_kind = speaker
            person = await self.resolve_person(agent_id, identity, display_name, person_kind, now)
        participants = [person.id] if person is not None else []
        conversation = await self.open_conversation(
            agent_id, service, channel, participants, now, idle_timeout_seconds, kind
        )
        message = make_message(person, conversation)
        await self.add_message(message)
        return person, conversation, message

    async def record_reply(
        self,
        message: Message,
        marker: Callable[[Message], CompletionMarker],
        outbox: Callable[[Message], OutboxRow | None] | None = None,
        upkeep: ReplyUpkeep | None = None,
    ) -> Message:
        """Add the agent's reply to an event (or find the one already stored for it), put
        the completion marker `marker` makes from the stored reply, write the outbox row
        `outbox` makes from it (None: nothing to deliver; an existing row is kept) and the
        `upkeep`. A backend should do it in one transaction: a reply recorded is then a reply
        on its way, and a waiter woken by the marker finds its row; this default does it in
        turn, the upkeep first."""
        agent_id = message.agent_id
        if upkeep is not None and upkeep.trace is not None and message.event_id is not None:
            await self.merge_deliberation(agent_id, message.event_id, upkeep.trace, message.created_at)
        stored = message
        if not await self.add_message(message) and message.event_id is not None:
            stored = await self.agent_reply_for_event(agent_id, message.event_id) or message
        await self.put_marker(agent_id, marker(stored))
        row = None if outbox is None else outbox(stored)
        if row is not None:
            await self.put_outbox(row)
        if upkeep is not None:
            spend = upkeep.spend
            if spend is not None:
                kind, service, channel, key = spend.kind, spend.service, spend.channel, spend.key
                at = message.created_at
                await self.spend_channel(
                    agent_id, kind, service, channel, key, spend.tokens, at, since=spend.since
                )
            for flag in upkeep.cleared_flags:
                await self.set_flag(agent_id, flag, None)
            for key, change in upkeep.updated_flags:
                await self.update_flag(agent_id, key, change)
        return stored
