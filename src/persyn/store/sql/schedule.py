"""Reminders and goals on SQLite (SPEC §4.7, §4.8): the `Store` methods over the
`reminders` and `goals` tables (migration 9).

`SqlSchedule` is mixed into `SQLiteStore` and runs its work through the store's `_read`
and `_write` (reader pool; the single writer thread with BEGIN IMMEDIATE). `mark_fired`
reads, decides and writes in one write transaction, so a racing scheduler — in this process
or another — sees either the reminder before or after, never half of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import bindparam, case, delete, insert, select, update
from sqlalchemy.engine import Connection

from persyn.core.errors import InputError, StoreError
from persyn.store.base import (
    FireResult,
    Goal,
    GoalStatus,
    Reminder,
    ReminderAction,
    ReminderStatus,
    Trigger,
)
from persyn.store.ports.schedule import MAX_GOAL_CHARS, MAX_OBJECTIVE_CHARS
from persyn.store.rows import checked_text
from persyn.store.schema.tables import goals, reminders
from persyn.store.sql.mapping import goal_from_row, provenance_values, reminder_from_row, reminder_values
from persyn.store.sql.work import SqlWork

__all__ = ["MAX_GOAL_CHARS", "MAX_OBJECTIVE_CHARS", "SqlSchedule"]

T = TypeVar("T")

_rm = reminders.c
_g = goals.c


class SqlSchedule(SqlWork):
    """The reminders-and-goals part of `SQLiteStore`."""

    # reminders ---------------------------------------------------------------------------
    async def add_reminder(self, reminder: Reminder) -> None:
        values = reminder_values(reminder)  # the row type validated ids, objective and action

        def work(connection: Connection) -> None:
            if connection.execute(select(_rm.id).where(_rm.id == reminder.id)).first() is not None:
                raise StoreError(f"a reminder with id {reminder.id!r} already exists")
            connection.execute(insert(reminders).values(**values))

        await self._write("add_reminder", work)

    async def get_reminder(self, agent_id: str, reminder_id: str) -> Reminder | None:
        statement = select(reminders).where(_rm.agent_id == agent_id, _rm.id == reminder_id)

        def work(connection: Connection) -> Reminder | None:
            row = connection.execute(statement).first()
            return None if row is None else reminder_from_row(row)

        return await self._read("get_reminder", work)

    async def list_reminders(
        self,
        agent_id: str,
        *,
        kind: str | None = "reminder",
        include_cancelled: bool = False,
        limit: int = 100,
    ) -> list[Reminder]:
        statement = select(reminders).where(_rm.agent_id == agent_id)
        if kind is not None:
            statement = statement.where(_rm.kind == kind)
        if not include_cancelled:
            statement = statement.where(_rm.status == ReminderStatus.ACTIVE.value)
        statement = statement.order_by(_rm.next_fire_at, _rm.id).limit(max(limit, 0))
        return await self._read(
            "list_reminders", lambda c: [reminder_from_row(row) for row in c.execute(statement)]
        )

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
        if trigger is not None and next_fire_at is None:
            raise InputError("a new trigger needs the next fire time it gives (next_fire_at)")
        changes: dict[str, Any] = {"updated_at": now}
        if objective is not None:
            changes["objective"] = checked_text(objective, "reminder objective", MAX_OBJECTIVE_CHARS)
        if trigger is not None:
            changes["trigger"] = trigger.model_dump(mode="json")
        if next_fire_at is not None:
            changes["next_fire_at"] = next_fire_at
        if action is not None:
            changes["action"] = action.model_dump(mode="json", exclude_none=True)

        def work(connection: Connection) -> Reminder:
            current = _load_reminder(connection, agent_id, reminder_id)
            if current.status is ReminderStatus.CANCELLED:
                raise InputError(f"reminder {reminder_id!r} is cancelled; set a new one instead")
            connection.execute(
                update(reminders).where(_rm.agent_id == agent_id, _rm.id == reminder_id).values(**changes)
            )
            return _load_reminder(connection, agent_id, reminder_id)

        return await self._write("update_reminder", work)

    async def cancel_reminder(self, agent_id: str, reminder_id: str, now: datetime) -> Reminder:
        def work(connection: Connection) -> Reminder:
            current = _load_reminder(connection, agent_id, reminder_id)
            if current.status is ReminderStatus.CANCELLED:
                return current
            connection.execute(
                update(reminders)
                .where(_rm.agent_id == agent_id, _rm.id == reminder_id)
                .values(status=ReminderStatus.CANCELLED.value, updated_at=now)
            )
            return _load_reminder(connection, agent_id, reminder_id)

        return await self._write("cancel_reminder", work)

    async def delete_reminder(self, agent_id: str, reminder_id: str) -> bool:
        statement = delete(reminders).where(_rm.agent_id == agent_id, _rm.id == reminder_id)
        return await self._write("delete_reminder", lambda c: c.execute(statement).rowcount > 0)

    async def due_reminders(
        self, now: datetime, *, agent_id: str | None = None, limit: int = 100
    ) -> list[Reminder]:
        statement = select(reminders).where(
            _rm.status == ReminderStatus.ACTIVE.value, _rm.next_fire_at <= now
        )
        if agent_id is not None:
            statement = statement.where(_rm.agent_id == agent_id)
        statement = statement.order_by(_rm.next_fire_at, _rm.id).limit(max(limit, 0))
        return await self._read(
            "due_reminders", lambda c: [reminder_from_row(row) for row in c.execute(statement)]
        )

    async def mark_fired(
        self,
        agent_id: str,
        reminder_id: str,
        fire_time: datetime,
        roll_forward: Callable[[Reminder], datetime | None],
    ) -> FireResult:
        def work(connection: Connection) -> FireResult:
            row = connection.execute(
                select(reminders).where(_rm.agent_id == agent_id, _rm.id == reminder_id)
            ).first()
            if row is None:
                return FireResult.STALE
            reminder = reminder_from_row(row)
            if reminder.status is not ReminderStatus.ACTIVE or reminder.next_fire_at != _utc(fire_time):
                return FireResult.STALE
            where = (_rm.agent_id == agent_id, _rm.id == reminder_id)
            following = roll_forward(reminder)
            if following is None:
                connection.execute(delete(reminders).where(*where))
                return FireResult.DELETED
            if _utc(following) <= _utc(fire_time):
                raise StoreError(
                    f"rolling reminder {reminder_id!r} forward from {fire_time.isoformat()!r} gave "
                    f"{following.isoformat()!r}, which is not later"
                )
            connection.execute(
                update(reminders)
                .where(*where)
                .values(next_fire_at=following, last_fired_at=fire_time, fire_count=_rm.fire_count + 1)
            )
            return FireResult.ROLLED_FORWARD

        return await self._write("mark_fired", work)

    # goals -------------------------------------------------------------------------------
    async def add_goal(self, goal: Goal) -> None:
        values = goal.model_dump(exclude={"provenance"})  # the row type validated ids and text
        values.update(provenance_values(goal.provenance))
        values["status"] = goal.status.value

        def work(connection: Connection) -> None:
            if connection.execute(select(_g.id).where(_g.id == goal.id)).first() is not None:
                raise StoreError(f"a goal with id {goal.id!r} already exists")
            connection.execute(insert(goals).values(**values))

        await self._write("add_goal", work)

    async def get_goal(self, agent_id: str, goal_id: str) -> Goal | None:
        statement = select(goals).where(_g.agent_id == agent_id, _g.id == goal_id)

        def work(connection: Connection) -> Goal | None:
            row = connection.execute(statement).first()
            return None if row is None else goal_from_row(row)

        return await self._read("get_goal", work)

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
        changes: dict[str, Any] = {"updated_at": now}
        if description is not None:
            changes["description"] = checked_text(description, "goal description", MAX_GOAL_CHARS)
        if status is not None:
            changes["status"] = GoalStatus(status).value
        if outcome is not None:
            changes["outcome"] = checked_text(outcome, "goal outcome", MAX_GOAL_CHARS)
        where = (_g.agent_id == agent_id, _g.id == goal_id)

        def work(connection: Connection) -> Goal:
            if connection.execute(update(goals).where(*where).values(**changes)).rowcount == 0:
                raise StoreError(f"no goal {goal_id!r} for agent {agent_id!r}")
            return goal_from_row(connection.execute(select(goals).where(*where)).one())

        return await self._write("update_goal", work)

    async def list_goals(
        self, agent_id: str, *, statuses: Sequence[GoalStatus] | None = None, limit: int = 100
    ) -> list[Goal]:
        # Every turn reads the open goals (standing context): a statement built once.
        params: dict[str, Any] = {"p_agent_id": agent_id, "p_limit": max(limit, 0)}
        statement = _SQL_GOALS_ANY
        if statuses is not None:
            statement = _SQL_GOALS
            params["p_statuses"] = [GoalStatus(s).value for s in statuses]
        return await self._read(
            "list_goals", lambda c: [goal_from_row(row) for row in c.execute(statement, params)]
        )


def _goals_query(with_statuses: bool) -> Any:
    statement = select(goals).where(_g.agent_id == bindparam("p_agent_id"))
    if with_statuses:
        statement = statement.where(_g.status.in_(bindparam("p_statuses", expanding=True)))
    is_open = _g.status == GoalStatus.OPEN.value
    return statement.order_by(
        case((is_open, 0), else_=1),
        case((is_open, _g.created_at), else_=None),  # open: oldest first
        _g.updated_at.desc(),  # closed: latest change first
        _g.id,
    ).limit(bindparam("p_limit"))


_SQL_GOALS = _goals_query(True)
_SQL_GOALS_ANY = _goals_query(False)


def _load_reminder(connection: Connection, agent_id: str, reminder_id: str) -> Reminder:
    row = connection.execute(select(reminders).where(_rm.agent_id == agent_id, _rm.id == reminder_id)).first()
    if row is None:
        raise StoreError(f"no reminder {reminder_id!r} for agent {agent_id!r}")
    return reminder_from_row(row)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
