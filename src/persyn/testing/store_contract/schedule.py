"""Reminders and goals (SPEC §4.7, §4.8), as every store must keep them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError, StoreError
from persyn.core.ids import new_id
from persyn.schedule import (
    HEARTBEAT_KIND,
    AtTrigger,
    CronTrigger,
    FireResult,
    Goal,
    GoalStatus,
    IntervalTrigger,
    Reminder,
    ReminderAction,
    ReminderStatus,
    close_goal,
    create_goal,
    cron_trigger,
    drop_recurrence,
    edit_reminder,
    interval_trigger,
    mark_fired,
    open_goals,
    reschedule_reminder,
    set_reminder,
)
from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _reminder(agent_id: str, objective: str, at: datetime, **fields: object) -> Reminder:
    return Reminder.model_validate(
        {
            "id": new_id(T0),
            "agent_id": agent_id,
            "objective": objective,
            "trigger": AtTrigger(at=at),
            "next_fire_at": at,
            "created_at": T0,
            "updated_at": T0,
            **fields,
        }
    )


class ScheduleContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_goals_and_reminders_keep_where_they_were_set(self, store: FullStore) -> None:
        from persyn.core.records import Sensitivity
        from persyn.store.base import GLOBAL, Provenance

        agent_id, ann = new_id(), new_id()
        dm = Provenance(channel="slack:dm-ann", participant_ids=(ann,), sensitivity=Sensitivity.CONFIDENTIAL)
        goal = await create_goal(store, agent_id, "Plan the party", T0, provenance=dm)
        reminder = await set_reminder(
            store, agent_id, "Buy the ring", AtTrigger(at=T0 + HOUR), T0, provenance=dm
        )
        assert goal.provenance == dm and (await open_goals(store, agent_id))[0].provenance == dm
        assert reminder.provenance == dm
        assert (await store.list_reminders(agent_id))[0].provenance == dm
        edited = await edit_reminder(store, agent_id, reminder.id, T0, objective="Buy the rings")
        assert edited.provenance == dm  # an edit keeps where it was set
        closed = await close_goal(store, agent_id, goal.id, GoalStatus.ACHIEVED, "done", T0 + HOUR)
        assert closed.provenance == dm
        assert (await create_goal(store, agent_id, "Learn Go", T0)).provenance == GLOBAL  # the default

    async def test_reminders_round_trip_with_their_trigger_and_action(self, store: FullStore) -> None:
        agent_id, person_id = new_id(), new_id()
        action = ReminderAction(person_id=person_id, service="terminal", channel="terminal")
        one_shot = await set_reminder(
            store, agent_id, "Ask Sam how the exam went", AtTrigger(at=T0 + HOUR), T0, action=action
        )
        daily = await set_reminder(store, agent_id, "Water the plants", cron_trigger("0 7 * * *"), T0)
        hourly = await set_reminder(store, agent_id, "Stretch", interval_trigger(3600, T0 + 2 * HOUR), T0)

        assert one_shot.action == action and one_shot.next_fire_at == T0 + HOUR
        assert one_shot.status is ReminderStatus.ACTIVE and one_shot.kind == "reminder"
        assert (one_shot.created_at, one_shot.updated_at, one_shot.last_fired_at, one_shot.fire_count) == (
            T0,
            T0,
            None,
            0,
        )
        assert daily.trigger == CronTrigger(expression="0 7 * * *")
        assert daily.next_fire_at == datetime(2026, 12, 1, 7, tzinfo=UTC)
        assert hourly.trigger == IntervalTrigger(every_seconds=3600, start=T0 + 2 * HOUR)
        assert await store.get_reminder(agent_id, one_shot.id) == one_shot
        listed = await store.list_reminders(agent_id)
        assert [r.id for r in listed] == [one_shot.id, hourly.id, daily.id]  # soonest first
        assert listed[0].next_fire_at.tzinfo is not None

    async def test_reminders_are_namespaced_per_agent(self, store: FullStore) -> None:
        ada, bob = new_id(), new_id()
        mine = await set_reminder(store, ada, "Mine", AtTrigger(at=T0 + HOUR), T0)
        assert await store.get_reminder(bob, mine.id) is None
        assert await store.list_reminders(bob) == []
        assert await store.due_reminders(T0 + HOUR, agent_id=bob) == []
        assert await store.mark_fired(bob, mine.id, T0 + HOUR, lambda r: None) is FireResult.STALE
        assert not await store.delete_reminder(bob, mine.id)
        with pytest.raises(StoreError, match="no reminder"):
            await store.cancel_reminder(bob, mine.id, T0)
        with pytest.raises(StoreError, match="no reminder"):
            await store.update_reminder(bob, mine.id, T0, objective="Theirs now")
        assert await store.get_reminder(ada, mine.id) == mine

    async def test_due_reminders_are_active_ones_at_or_before_now_earliest_first(
        self, store: FullStore
    ) -> None:
        ada, bob = new_id(), new_id()
        later = await set_reminder(store, ada, "Later", AtTrigger(at=T0 + 3 * HOUR), T0)
        soon = await set_reminder(store, ada, "Soon", AtTrigger(at=T0 + HOUR), T0)
        exactly = await set_reminder(store, bob, "Exactly now", AtTrigger(at=T0 + 2 * HOUR), T0)
        cancelled = await set_reminder(store, ada, "Cancelled", AtTrigger(at=T0 + HOUR), T0)
        await store.cancel_reminder(ada, cancelled.id, T0)

        now = T0 + 2 * HOUR
        assert [r.id for r in await store.due_reminders(now)] == [soon.id, exactly.id]  # every agent
        assert [r.id for r in await store.due_reminders(now, agent_id=ada)] == [soon.id]
        assert [r.id for r in await store.due_reminders(now, limit=1)] == [soon.id]
        assert await store.due_reminders(T0) == []
        assert later.id in {r.id for r in await store.due_reminders(T0 + 3 * HOUR)}

    async def test_a_one_shot_reminder_is_deleted_when_it_fires(self, store: FullStore) -> None:
        agent_id = new_id()
        reminder = await set_reminder(store, agent_id, "Once", AtTrigger(at=T0 + HOUR), T0)
        assert await mark_fired(store, reminder, T0 + HOUR, T0 + HOUR) is FireResult.DELETED
        assert await store.get_reminder(agent_id, reminder.id) is None
        assert await store.due_reminders(T0 + 10 * HOUR) == []
        # A second scheduler that saw it due changes nothing.
        assert await mark_fired(store, reminder, T0 + HOUR, T0 + HOUR) is FireResult.STALE

    async def test_a_recurring_reminder_rolls_forward_skipping_missed_fires(self, store: FullStore) -> None:
        agent_id = new_id()
        reminder = await set_reminder(store, agent_id, "Hourly", interval_trigger(3600, T0 + HOUR), T0)
        assert await mark_fired(store, reminder, T0 + HOUR, T0 + HOUR) is FireResult.ROLLED_FORWARD
        after_one = await store.get_reminder(agent_id, reminder.id)
        assert after_one is not None
        assert (after_one.next_fire_at, after_one.last_fired_at, after_one.fire_count) == (
            T0 + 2 * HOUR,
            T0 + HOUR,
            1,
        )
        # Nothing ran for a day and a half: it fires once for the missed time, then waits for
        # the next hour after now instead of replaying every missed hour.
        now = T0 + timedelta(hours=38, minutes=20)
        (due,) = await store.due_reminders(now)
        assert await mark_fired(store, due, due.next_fire_at, now) is FireResult.ROLLED_FORWARD
        after_two = await store.get_reminder(agent_id, reminder.id)
        assert after_two is not None
        assert (after_two.next_fire_at, after_two.last_fired_at, after_two.fire_count) == (
            T0 + 39 * HOUR,
            T0 + 2 * HOUR,
            2,
        )
        assert await store.due_reminders(now) == []

    async def test_racing_schedulers_fire_a_reminder_once(self, store: FullStore) -> None:
        agent_id = new_id()
        reminder = await set_reminder(store, agent_id, "Daily", cron_trigger("0 10 * * *"), T0)
        fire_time = reminder.next_fire_at
        results = await asyncio.gather(*(mark_fired(store, reminder, fire_time, fire_time) for _ in range(5)))
        assert sorted(results) == sorted([FireResult.ROLLED_FORWARD] + [FireResult.STALE] * 4)
        stored = await store.get_reminder(agent_id, reminder.id)
        assert stored is not None and stored.fire_count == 1
        assert stored.next_fire_at == fire_time + timedelta(days=1)

    async def test_mark_fired_refuses_a_next_time_that_is_not_later(self, store: FullStore) -> None:
        agent_id = new_id()
        reminder = await set_reminder(store, agent_id, "Broken", interval_trigger(3600, T0 + HOUR), T0)
        with pytest.raises(StoreError, match="which is not later"):
            await store.mark_fired(agent_id, reminder.id, T0 + HOUR, lambda r: T0 + HOUR)
        assert await store.get_reminder(agent_id, reminder.id) == reminder  # nothing changed

    async def test_cancelled_and_edited_reminders_do_not_fire_for_the_old_time(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        cancelled = await set_reminder(store, agent_id, "Cancel me", AtTrigger(at=T0 + HOUR), T0)
        moved = await set_reminder(store, agent_id, "Move me", AtTrigger(at=T0 + HOUR), T0)
        await store.cancel_reminder(agent_id, cancelled.id, T0 + timedelta(minutes=5))
        await reschedule_reminder(store, agent_id, moved.id, T0 + 5 * HOUR, T0)
        assert await mark_fired(store, cancelled, T0 + HOUR, T0 + HOUR) is FireResult.STALE
        assert await mark_fired(store, moved, T0 + HOUR, T0 + HOUR) is FireResult.STALE
        assert await store.due_reminders(T0 + 4 * HOUR) == []
        assert [r.id for r in await store.due_reminders(T0 + 5 * HOUR)] == [moved.id]

    async def test_editing_a_reminder(self, store: FullStore) -> None:
        agent_id, person_id = new_id(), new_id()
        reminder = await set_reminder(store, agent_id, "Call mum", cron_trigger("0 18 * * 0"), T0)
        edited = await edit_reminder(
            store,
            agent_id,
            reminder.id,
            T0 + HOUR,
            objective="  Call mum and dad  ",
            trigger=cron_trigger("0 17 * * 6"),
            action=ReminderAction(person_id=person_id),
        )
        assert edited.objective == "Call mum and dad"
        assert edited.trigger == CronTrigger(expression="0 17 * * 6")
        assert edited.next_fire_at == datetime(2026, 12, 5, 17, tzinfo=UTC)  # the next Saturday
        assert edited.action == ReminderAction(person_id=person_id)
        assert (edited.created_at, edited.updated_at) == (T0, T0 + HOUR)

        # Reschedule a recurring one: it fires at the new time, then carries on from its trigger.
        moved = await reschedule_reminder(store, agent_id, reminder.id, T0 + 2 * HOUR, T0 + HOUR)
        assert moved.next_fire_at == T0 + 2 * HOUR and moved.trigger == edited.trigger
        assert await mark_fired(store, moved, T0 + 2 * HOUR, T0 + 2 * HOUR) is FireResult.ROLLED_FORWARD
        rolled = await store.get_reminder(agent_id, reminder.id)
        assert rolled is not None and rolled.next_fire_at == datetime(2026, 12, 5, 17, tzinfo=UTC)

        # Drop the recurrence: one more fire, then it is gone.
        one_shot = await drop_recurrence(store, agent_id, reminder.id, T0 + 3 * HOUR)
        assert one_shot.trigger == AtTrigger(at=rolled.next_fire_at)
        assert one_shot.next_fire_at == rolled.next_fire_at
        assert (
            await mark_fired(store, one_shot, one_shot.next_fire_at, one_shot.next_fire_at)
            is FireResult.DELETED
        )
        assert await store.get_reminder(agent_id, reminder.id) is None

    async def test_reminder_edits_that_cannot_work_are_refused(self, store: FullStore) -> None:
        agent_id = new_id()
        reminder = await set_reminder(store, agent_id, "Keep", AtTrigger(at=T0 + HOUR), T0)
        with pytest.raises(InputError, match="needs the next fire time"):
            await store.update_reminder(agent_id, reminder.id, T0, trigger=CronTrigger(expression="@daily"))
        with pytest.raises(InputError, match="reminder objective is empty"):
            await store.update_reminder(agent_id, reminder.id, T0, objective="   ")
        with pytest.raises(InputError, match="has already passed"):
            await reschedule_reminder(store, agent_id, reminder.id, T0 - HOUR, T0)
        with pytest.raises(InputError, match="invalid person id"):
            await store.update_reminder(agent_id, reminder.id, T0, action=ReminderAction(person_id="sam"))
        with pytest.raises(InputError, match="there is no reminder"):
            await reschedule_reminder(store, agent_id, new_id(), T0 + HOUR, T0)
        await store.cancel_reminder(agent_id, reminder.id, T0)
        again = await store.cancel_reminder(agent_id, reminder.id, T0 + HOUR)  # idempotent
        assert again.status is ReminderStatus.CANCELLED and again.updated_at == T0
        with pytest.raises(InputError, match="is cancelled"):
            await store.update_reminder(agent_id, reminder.id, T0, objective="Revive")
        assert await store.list_reminders(agent_id) == []
        assert [r.id for r in await store.list_reminders(agent_id, include_cancelled=True)] == [reminder.id]

    async def test_new_reminders_are_validated(self, store: FullStore) -> None:
        agent_id = new_id()
        with pytest.raises(InputError, match="reminder objective is empty"):
            await store.add_reminder(_reminder(agent_id, "", T0))
        with pytest.raises(InputError, match="is 4001 characters long; the limit is 4000"):
            await store.add_reminder(_reminder(agent_id, "x" * 4001, T0))
        with pytest.raises(InputError, match="invalid reminder id 'r1'"):
            await store.add_reminder(_reminder(agent_id, "Bad id", T0, id="r1"))
        with pytest.raises(InputError, match="invalid agent id"):
            await store.add_reminder(_reminder("ada", "Bad agent", T0))
        reminder = _reminder(agent_id, "Twice", T0)
        await store.add_reminder(reminder)
        with pytest.raises(StoreError, match="already exists"):
            await store.add_reminder(reminder)
        assert len(await store.list_reminders(agent_id)) == 1

    async def test_delete_removes_a_reminder(self, store: FullStore) -> None:
        agent_id = new_id()
        reminder = await set_reminder(store, agent_id, "Gone", AtTrigger(at=T0 + HOUR), T0)
        assert await store.delete_reminder(agent_id, reminder.id)
        assert not await store.delete_reminder(agent_id, reminder.id)
        assert await store.get_reminder(agent_id, reminder.id) is None

    async def test_the_heartbeat_kind_is_kept_apart_from_the_agents_reminders(self, store: FullStore) -> None:
        agent_id = new_id()
        beat = await set_reminder(
            store, agent_id, "Reflect and act", interval_trigger(1800, T0), T0, kind=HEARTBEAT_KIND
        )
        own = await set_reminder(store, agent_id, "Mine", AtTrigger(at=T0 + HOUR), T0)
        assert [r.id for r in await store.list_reminders(agent_id)] == [own.id]
        assert [r.id for r in await store.list_reminders(agent_id, kind=HEARTBEAT_KIND)] == [beat.id]
        assert [r.id for r in await store.list_reminders(agent_id, kind=None)] == [beat.id, own.id]
        # The scheduler fires both kinds.
        assert [r.id for r in await store.due_reminders(T0 + HOUR)] == [beat.id, own.id]

    async def test_goals_are_created_revised_and_closed(self, store: FullStore) -> None:
        agent_id = new_id()
        goal = await create_goal(store, agent_id, "  Learn the names of Sam's cats  ", T0)
        assert goal == Goal(
            id=goal.id,
            agent_id=agent_id,
            description="Learn the names of Sam's cats",
            status=GoalStatus.OPEN,
            created_at=T0,
            updated_at=T0,
            outcome=None,
        )
        revised = await store.update_goal(agent_id, goal.id, T0 + HOUR, description="Learn the cats' names")
        assert (revised.description, revised.status, revised.updated_at) == (
            "Learn the cats' names",
            GoalStatus.OPEN,
            T0 + HOUR,
        )
        done = await close_goal(
            store, agent_id, goal.id, GoalStatus.ACHIEVED, "Miso and Tofu.", T0 + 2 * HOUR
        )
        assert (done.status, done.outcome, done.created_at) == (GoalStatus.ACHIEVED, "Miso and Tofu.", T0)
        assert await store.get_goal(agent_id, goal.id) == done
        assert await open_goals(store, agent_id) == []

    async def test_goals_list_open_first_oldest_first_then_latest_closed(self, store: FullStore) -> None:
        agent_id = new_id()
        first = await create_goal(store, agent_id, "First", T0)
        second = await create_goal(store, agent_id, "Second", T0 + HOUR)
        third = await create_goal(store, agent_id, "Third", T0 + 2 * HOUR)
        fourth = await create_goal(store, agent_id, "Fourth", T0 + 3 * HOUR)
        await close_goal(store, agent_id, first.id, GoalStatus.ABANDONED, "Lost interest.", T0 + 5 * HOUR)
        await close_goal(store, agent_id, third.id, GoalStatus.RETIRED, "Superseded.", T0 + 6 * HOUR)
        await store.update_goal(agent_id, fourth.id, T0 + 7 * HOUR, description="Fourth, revised")

        listed = await store.list_goals(agent_id)
        assert [g.id for g in listed] == [second.id, fourth.id, third.id, first.id]
        assert [g.id for g in await open_goals(store, agent_id)] == [second.id, fourth.id]
        closed = await store.list_goals(agent_id, statuses=[GoalStatus.ABANDONED, GoalStatus.RETIRED])
        assert [g.id for g in closed] == [third.id, first.id]
        assert [g.id for g in await store.list_goals(agent_id, limit=1)] == [second.id]
        assert await store.list_goals(new_id()) == []  # namespaced per agent

    async def test_goal_errors(self, store: FullStore) -> None:
        agent_id = new_id()
        with pytest.raises(InputError, match="goal description is empty"):
            await create_goal(store, agent_id, " ", T0)
        goal = await create_goal(store, agent_id, "Something", T0)
        with pytest.raises(StoreError, match="no goal"):
            await store.update_goal(new_id(), goal.id, T0, status=GoalStatus.RETIRED)
        with pytest.raises(StoreError, match="no goal"):
            await store.update_goal(agent_id, new_id(), T0, status=GoalStatus.RETIRED)
        with pytest.raises(InputError, match="other than 'open'"):
            await close_goal(store, agent_id, goal.id, GoalStatus.OPEN, "?", T0)
        with pytest.raises(StoreError, match="already exists"):
            await store.add_goal(goal)
