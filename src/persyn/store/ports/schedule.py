"""The schedule sub-port (SPEC §4.7, §4.8): reminders (and the heartbeat) and goals.

The trigger math (cron, intervals, rolling forward) lives in `persyn.schedule.triggers`;
the store keeps triggers as data and never interprets them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from persyn.store.rows import GLOBAL, AgentId, Provenance, Row, bounded_text, ulid

__all__ = [
    "MAX_GOAL_CHARS",
    "MAX_OBJECTIVE_CHARS",
    "AtTrigger",
    "CronTrigger",
    "FireResult",
    "Goal",
    "GoalStatus",
    "IntervalTrigger",
    "Reminder",
    "ReminderAction",
    "ReminderStatus",
    "SchedulePort",
    "Trigger",
]


MAX_OBJECTIVE_CHARS = 4000
MAX_GOAL_CHARS = 4000


class AtTrigger(Row):
    """Fire once, at `at` (UTC)."""

    kind: Literal["at"] = "at"
    at: datetime


class CronTrigger(Row):
    """Fire at every match of a five-field cron expression, evaluated in UTC."""

    kind: Literal["cron"] = "cron"
    expression: str = Field(min_length=1, max_length=200)


class IntervalTrigger(Row):
    """Fire at `start`, then every `every_seconds` after it."""

    kind: Literal["interval"] = "interval"
    every_seconds: int = Field(ge=1)
    start: datetime


Trigger = Annotated[AtTrigger | CronTrigger | IntervalTrigger, Field(discriminator="kind")]


class ReminderAction(Row):
    """What a firing reminder does besides waking the agent with its objective: whom to
    address (a person of the directory) and where (a service and channel; unset: the
    person's preferred or most recently used channel, SPEC §4.5)."""

    person_id: Annotated[str, ulid("person id")] | None = None
    service: str | None = Field(default=None, max_length=200)
    channel: str | None = Field(default=None, max_length=500)


class ReminderStatus(StrEnum):
    ACTIVE = "active"
    CANCELLED = "cancelled"


class Reminder(Row):
    """A row of the persistent schedule (SPEC §4.7). `kind` is "reminder" for the ones the
    agent sets itself, "heartbeat" for the core one the agent's tools never show."""

    id: Annotated[str, ulid("reminder id")]
    agent_id: AgentId
    kind: str = "reminder"
    objective: Annotated[str, bounded_text("reminder objective", MAX_OBJECTIVE_CHARS)]
    trigger: Trigger
    action: ReminderAction = ReminderAction()
    status: ReminderStatus = ReminderStatus.ACTIVE
    next_fire_at: datetime
    created_at: datetime
    updated_at: datetime
    last_fired_at: datetime | None = None
    fire_count: int = 0
    # Where it was set (its objective is repeated by list_reminders and by the run it wakes).
    provenance: Provenance = GLOBAL


class FireResult(StrEnum):
    """What `Store.mark_fired` did."""

    ROLLED_FORWARD = "rolled_forward"  # a recurring reminder now waits for its next time
    DELETED = "deleted"  # a one-shot reminder (or one with no next time) is gone
    STALE = "stale"  # nothing: already fired for that time, cancelled, edited or deleted


class GoalStatus(StrEnum):
    OPEN = "open"
    ACHIEVED = "achieved"
    ABANDONED = "abandoned"
    RETIRED = "retired"


class Goal(Row):
    """A goal the agent set itself (SPEC §4.8); `outcome` says how a closed one ended."""

    id: Annotated[str, ulid("goal id")]
    agent_id: AgentId
    description: Annotated[str, bounded_text("goal description", MAX_GOAL_CHARS)]
    status: GoalStatus = GoalStatus.OPEN
    created_at: datetime
    updated_at: datetime
    outcome: Annotated[str, bounded_text("goal outcome", MAX_GOAL_CHARS)] | None = None
    # Where it formed: open goals are standing context only where they may surface.
    provenance: Provenance = GLOBAL


class SchedulePort(ABC):
    """Reminders and goals the agent set itself."""

    @abstractmethod
    async def add_reminder(self, reminder: Reminder) -> None:
        """Store a new reminder. An id that exists is a StoreError."""

    @abstractmethod
    async def get_reminder(self, agent_id: str, reminder_id: str) -> Reminder | None: ...

    @abstractmethod
    async def list_reminders(
        self,
        agent_id: str,
        *,
        kind: str | None = "reminder",
        include_cancelled: bool = False,
        limit: int = 100,
    ) -> list[Reminder]:
        """The agent's reminders of `kind` (None: every kind), soonest first."""

    @abstractmethod
    async def update_reminder(
        self,
        agent_id: str,
        reminder_id: str,
        now: datetime,
        *,
        objective: str | None = None,
        trigger: Trigger | None = None,
        next_fire_at: datetime | None = None,
        action: ReminderAction | None = None,
    ) -> Reminder:
        """Edit an active reminder; None leaves a field as it is. A new trigger needs the
        `next_fire_at` it gives (computed by `persyn.schedule`); a new `next_fire_at` alone
        reschedules. A missing reminder is a StoreError; a cancelled one an InputError."""

    @abstractmethod
    async def cancel_reminder(self, agent_id: str, reminder_id: str, now: datetime) -> Reminder:
        """Mark a reminder cancelled: it never fires again but stays listed with
        `include_cancelled`. Idempotent; a missing reminder is a StoreError."""

    @abstractmethod
    async def delete_reminder(self, agent_id: str, reminder_id: str) -> bool:
        """Remove a reminder entirely; False if there was none."""

    @abstractmethod
    async def due_reminders(
        self, now: datetime, *, agent_id: str | None = None, limit: int = 100
    ) -> list[Reminder]:
        """Active reminders whose next fire time is at or before `now` (of one agent, or of
        every agent), earliest first."""

    @abstractmethod
    async def mark_fired(
        self,
        agent_id: str,
        reminder_id: str,
        fire_time: datetime,
        roll_forward: Callable[[Reminder], datetime | None],
    ) -> FireResult:
        """Record that the reminder fired for `fire_time`, atomically: only if it is still
        active and due at exactly `fire_time` (else STALE, and nothing changes — so several
        schedulers may race). `roll_forward` gets the reminder as stored and returns its next
        fire time, or None for a one-shot, which is then deleted; a recurring one moves to
        that time, with `last_fired_at` and `fire_count` updated. `roll_forward` runs inside
        the write transaction: it must be a pure, quick function."""

    @abstractmethod
    async def add_goal(self, goal: Goal) -> None:
        """Store a new goal. An id that exists is a StoreError."""

    @abstractmethod
    async def get_goal(self, agent_id: str, goal_id: str) -> Goal | None: ...

    @abstractmethod
    async def update_goal(
        self,
        agent_id: str,
        goal_id: str,
        now: datetime,
        *,
        description: str | None = None,
        status: GoalStatus | None = None,
        outcome: str | None = None,
    ) -> Goal:
        """Revise a goal; None leaves a field as it is. A missing goal is a StoreError."""

    @abstractmethod
    async def list_goals(
        self, agent_id: str, *, statuses: Sequence[GoalStatus] | None = None, limit: int = 100
    ) -> list[Goal]:
        """Goals with one of `statuses` (None: all): open ones first, oldest first; then
        the closed ones, most recently updated first."""
