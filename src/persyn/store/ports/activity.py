"""The activity sub-port (SPEC §4.6, §4.7): the log of what the agent did on its own — each
self-initiated run (heartbeat beat, reminder firing) or skipped run, with what it cost.

A log, not flags: rows are indexed by (agent, time), so the autonomy budget's rolling window
reads the newest runs whatever the log's length, and old runs are purged by age.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Annotated

from persyn.core.records import Sensitivity
from persyn.store.rows import AgentId, Provenance, Row, ulid

__all__ = ["OPERATOR_KIND", "UNATTRIBUTED_RUN", "ActivityEntry", "ActivityPort"]

# An operator's action from the web console (`ops/operator_actions.py`): logged, not a run.
OPERATOR_KIND = "operator"

# An entry written before runs carried provenance: it may hold anything the run read, so it
# is the agent's own — shown only with nobody present (its reflections), never to anyone.
UNATTRIBUTED_RUN = Provenance(sensitivity=Sensitivity.PRIVATE)


class ActivityEntry(Row):
    """One self-initiated run (or a skip): what the agent did on its own, and what it cost."""

    id: Annotated[str, ulid("run id")]  # the run's event id (skips: derived from the fire key too)
    agent_id: AgentId
    at: datetime
    kind: str  # "heartbeat" | "reminder" | OPERATOR_KIND
    reminder_id: str
    objective: str
    outcome: str
    tokens: int = 0
    conversation_id: str | None = None
    # Where what the run read may surface; `recent_activity` (the tool) shows it only there.
    provenance: Provenance = UNATTRIBUTED_RUN


class ActivityPort(ABC):
    """The agent's log of self-initiated runs."""

    @abstractmethod
    async def add_activity(self, entry: ActivityEntry) -> None:
        """Log a run; an entry with the id of one already logged for the agent replaces it
        (a replayed step logs the same run once)."""

    @abstractmethod
    async def recent_activity(
        self,
        agent_id: str,
        *,
        limit: int,
        kind: str | None = None,
        reminder_id: str | None = None,
        since: datetime | None = None,
    ) -> list[ActivityEntry]:
        """The newest `limit` runs (of `kind`, for `reminder_id`, at or after `since`, when
        given), newest first by (at, id)."""

    @abstractmethod
    async def activity_tokens(self, agent_id: str, after: datetime, until: datetime) -> int:
        """Tokens the runs logged in (`after`, `until`] used: the rolling budget's window."""

    @abstractmethod
    async def purge_activity(self, agent_id: str, before: datetime) -> int:
        """Delete the agent's runs logged before `before`; return how many went."""
