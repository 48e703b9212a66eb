"""The activity sub-port (SPEC §4.6, §4.7): the log of what the agent did on its own — each
self-initiated run (heartbeat beat, reminder firing) or skipped run, with what it cost.

A log, not flags: rows are indexed by (agent, time), so the autonomy budget's rolling window
reads the newest runs whatever the log's length, and old runs are purged by age.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated

from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.rows import AgentId, Provenance, Row, ulid

__all__ = [
    "CULL_KIND",
    "MEMORY_EVENT_KINDS",
    "OPERATOR_KIND",
    "REMEMBER_HARDER_KIND",
    "UNATTRIBUTED_RUN",
    "ActivityEntry",
    "ActivityPort",
    "cull_entry",
    "remember_harder_entry",
]

# An operator's action from the web console (`ops/operator_actions.py`): logged, not a run.
OPERATOR_KIND = "operator"
# What happened to memories, logged so the operator sees it (the console's memory events):
# the daily cull (or `persyn memory cull`), and the agent pulling the raw dialog behind a
# memory (`recall_dialog`, SPEC §4.1 "remember harder").
CULL_KIND = "cull"
REMEMBER_HARDER_KIND = "remember_harder"
MEMORY_EVENT_KINDS = (CULL_KIND, REMEMBER_HARDER_KIND)
_LISTED = 20  # culled memories an entry names one by one
_SHORT = 60  # characters of each one's summary

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


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHORT else flat[: _SHORT - 1] + "…"


def cull_entry(
    agent_id: str,
    at: datetime,
    doomed: Sequence[MemoryRecord],
    below_importance: int,
    after_days: float,
    by: str,
) -> ActivityEntry:
    """The log entry of one cull (`by` whom): how many went, under which rule, and each one's id and the start of
    its summary (the first `_LISTED`). The agent's own (`UNATTRIBUTED_RUN`): the summaries of
    memories from any channel are in it. Its id derives from what went, so a cull logged
    again (a retried chore) is one entry."""
    listed = "; ".join(f"{r.id} “{_short(r.summary)}”" for r in doomed[:_LISTED])
    more = f"; and {len(doomed) - _LISTED} more" if len(doomed) > _LISTED else ""
    rule = f"importance below {below_importance}, older than {after_days:g} days"
    return ActivityEntry(
        id=derived_id(at, agent_id, CULL_KIND, *sorted(r.id for r in doomed)),
        agent_id=agent_id,
        at=at,
        kind=CULL_KIND,
        reminder_id="",
        objective=f"cull {len(doomed)} {'memory' if len(doomed) == 1 else 'memories'} ({rule}, by {by})",
        outcome=f"culled {listed}{more}",
    )


def remember_harder_entry(
    agent_id: str, at: datetime, event_id: str, record: MemoryRecord, lines: int
) -> ActivityEntry:
    """The log entry of the agent pulling the dialog behind `record` in the turn `event_id`
    (one entry per memory and turn, however often a replay asks), as visible as the memory."""
    return ActivityEntry(
        id=derived_id(at, agent_id, REMEMBER_HARDER_KIND, event_id, record.id),
        agent_id=agent_id,
        at=at,
        kind=REMEMBER_HARDER_KIND,
        reminder_id="",
        objective=f"remember harder: memory {record.id}",
        outcome=f"read {lines} {'line' if lines == 1 else 'lines'} of the dialog behind “{_short(record.summary)}”",
        conversation_id=record.conversation_id,
        provenance=Provenance(
            channel=record.channel, participant_ids=record.participant_ids, sensitivity=record.sensitivity
        ),
    )
