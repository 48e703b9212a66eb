"""The events sub-port (ARCHITECTURE §4): inbound events, the completion marker of each
event's run, and the deliberation trace of what deliberation did for it — all keyed by event."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from persyn.core.events import CompletionMarker, Event
from persyn.store.rows import Row

__all__ = ["DeliberationTrace", "EventsPort"]


class DeliberationTrace(Row):
    """What deliberation did for one inbound event (SPEC §4.2): the mode, each critic's
    objections or why it was skipped, the tools it used, the decision. Written in parts as the
    activation goes (`merge_deliberation`); `persyn conversations show --deliberation` reads it."""

    event_id: str
    trace: dict[str, Any]
    updated_at: datetime


class EventsPort(ABC):
    """Inbound events and how their runs ended."""

    @abstractmethod
    async def save_event(self, event: Event) -> bool:
        """Persist an inbound event. Returns False (and changes nothing) if its id exists."""

    @abstractmethod
    async def get_event(self, agent_id: str, event_id: str) -> Event | None: ...

    @abstractmethod
    async def put_marker(self, agent_id: str, marker: CompletionMarker) -> None:
        """Record how an event's run ended; a second put for the same event replaces it."""

    @abstractmethod
    async def get_marker(self, agent_id: str, event_id: str, now: datetime) -> CompletionMarker | None:
        """The marker, or None if absent or expired at `now`."""

    @abstractmethod
    async def purge_markers(self, now: datetime) -> int:
        """Delete expired markers; return how many went."""

    @abstractmethod
    async def merge_deliberation(
        self, agent_id: str, event_id: str, trace: Mapping[str, Any], now: datetime
    ) -> None:
        """Add `trace`'s keys to the event's deliberation trace (created on first use; a key
        written again is replaced), atomically against other writers. Values are JSON."""

    @abstractmethod
    async def deliberation_traces(self, agent_id: str, event_ids: Sequence[str]) -> list[DeliberationTrace]:
        """The traces recorded for any of `event_ids` (any order; events without one are absent)."""
