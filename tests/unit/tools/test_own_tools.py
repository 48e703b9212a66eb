"""The agent's own reminder and goal tools (SPEC §4.6-4.8), called as the model calls them:
through the registry, on a real SQLite store and a clock the test moves."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from persyn.core.clock import ManualClock
from persyn.core.ids import new_id
from persyn.gateway.base import ToolCall
from persyn.schedule import (
    HEARTBEAT_KIND,
    AtTrigger,
    GoalStatus,
    ReminderAction,
    interval_trigger,
    set_reminder,
)
from persyn.store import Identity
from persyn.store.sqlite.store import SQLiteStore
from persyn.tools import ToolOutcome, ToolRegistry, ToolStatus
from persyn.tools.builtin.own import OwnToolsContext, goal_tools, reminder_tools

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = new_id(T0)


class Agent:
    """Calls tools the way the tool loop does, and reads their JSON output back."""

    def __init__(self, store: SQLiteStore, clock: ManualClock, action: ReminderAction) -> None:
        context = OwnToolsContext(store=store, agent_id=AGENT, clock=clock, default_action=action)
        self.registry = ToolRegistry([*reminder_tools(context), *goal_tools(context)])
        self.calls = 0

    async def call(self, name: str, **args: Any) -> ToolOutcome:
        self.calls += 1
        return await self.registry.call(ToolCall(id=f"call_{self.calls}", name=name, args=args))

    async def ok(self, name: str, **args: Any) -> dict[str, Any]:
        outcome = await self.call(name, **args)
        assert outcome.status is ToolStatus.OK, outcome.content
        result: dict[str, Any] = json.loads(outcome.content)
        return result


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    yield opened
    await opened.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def sam_action() -> ReminderAction:
    return ReminderAction(person_id=new_id(T0), service="terminal", channel="terminal")


@pytest.fixture
def agent(store: SQLiteStore, clock: ManualClock, sam_action: ReminderAction) -> Agent:
    return Agent(store, clock, sam_action)


def test_the_tools_are_advertised_sorted() -> None:
    registry = ToolRegistry([*reminder_tools(_context()), *goal_tools(_context())])
    assert registry.names == (
        "cancel_reminder",
        "create_goal",
        "edit_reminder",
        "list_goals",
        "list_reminders",
        "set_reminder",
        "update_goal",
    )


def _context() -> OwnToolsContext:
    return OwnToolsContext(store=None, agent_id=AGENT, clock=ManualClock(T0))  # type: ignore[arg-type]


async def test_setting_reminders_each_way(agent: Agent, sam_action: ReminderAction) -> None:
    once = await agent.ok("set_reminder", objective="Ask Sam how the exam went.", in_minutes=90)
    assert once == {
        "id": once["id"],
        "objective": "Ask Sam how the exam went.",
        "schedule": "once at 2026-11-30T10:30:00+00:00",
        "next_fire_at": "2026-11-30T10:30:00+00:00",
        "recurring": False,
        "person_id": sam_action.person_id,
        "service": "terminal",
        "channel": "terminal",
    }
    at = await agent.ok("set_reminder", objective="Dentist", at="2026-12-02T08:15:00")
    assert at["next_fire_at"] == "2026-12-02T08:15:00+00:00"  # no zone: UTC
    zoned = await agent.ok("set_reminder", objective="Call", at="2026-12-02T08:15:00+01:00")
    assert zoned["next_fire_at"] == "2026-12-02T07:15:00+00:00"
    weekly = await agent.ok("set_reminder", objective="Review the week", cron="0 17 * * 5")
    assert (weekly["next_fire_at"], weekly["recurring"]) == ("2026-12-04T17:00:00+00:00", True)
    hourly = await agent.ok("set_reminder", objective="Stretch", every_minutes=60)
    assert hourly["schedule"] == "every 3600 seconds from 2026-11-30T10:00:00+00:00"

    listed = await agent.ok("list_reminders")
    assert [r["objective"] for r in listed["reminders"]] == [  # soonest first
        "Stretch",
        "Ask Sam how the exam went.",
        "Call",
        "Dentist",
        "Review the week",
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"objective": "x"}, "give exactly one of at, in_minutes, cron or every_minutes"),
        ({"objective": "x", "in_minutes": 5, "cron": "@daily"}, "give exactly one of"),
        ({"objective": "", "in_minutes": 5}, "objective: String should have at least 1 character"),
        ({"objective": "x", "in_minutes": 0}, "in_minutes: Input should be greater than or equal to 1"),
        ({"objective": "x", "at": "tomorrow-ish"}, "at: Input should be a valid datetime"),
        ({"objective": "x", "in_minutes": 5, "when": "now"}, "when: Extra inputs are not permitted"),
    ],
)
async def test_invalid_reminder_arguments_are_results(
    agent: Agent, args: dict[str, Any], expected: str
) -> None:
    outcome = await agent.call("set_reminder", **args)
    assert outcome.status is ToolStatus.INVALID_ARGUMENTS
    assert expected in outcome.content


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"at": "2026-11-30T08:00:00Z"}, "has already passed"),
        ({"cron": "0 9 * *"}, "has 4 fields; use five"),
        ({"cron": "0 0 30 2 *"}, "never matches a real date"),
        ({"person_id": "sam", "in_minutes": 5}, "invalid person id 'sam'"),
        ({"person_id": new_id(T0), "in_minutes": 5}, "there is no contact"),
    ],
)
async def test_reminders_that_cannot_work_are_failures_the_model_can_read(
    agent: Agent, args: dict[str, Any], expected: str
) -> None:
    outcome = await agent.call("set_reminder", objective="x", **args)
    assert outcome.status is ToolStatus.FAILED
    assert outcome.content.startswith("Tool 'set_reminder' failed: ")
    assert expected in outcome.content
    assert (await agent.ok("list_reminders"))["reminders"] == []


async def test_a_reminder_can_address_a_known_contact(agent: Agent, store: SQLiteStore) -> None:
    ann = await store.resolve_person(
        AGENT, Identity(service="slack", channel="dm", speaker_id="U1"), "Ann", "human", T0
    )
    set_ = await agent.ok("set_reminder", objective="Wish Ann luck", in_minutes=5, person_id=ann.id)
    assert (set_["person_id"], set_["service"], set_["channel"]) == (ann.id, None, None)


async def test_editing_rescheduling_and_dropping_recurrence(agent: Agent, clock: ManualClock) -> None:
    daily = await agent.ok("set_reminder", objective="Water the plants", cron="0 7 * * *")
    edited = await agent.ok("edit_reminder", reminder_id=daily["id"], objective="Water the ferns")
    assert (edited["objective"], edited["next_fire_at"]) == ("Water the ferns", "2026-12-01T07:00:00+00:00")
    moved = await agent.ok("edit_reminder", reminder_id=daily["id"], at="2026-12-01T08:30:00Z")
    assert (moved["next_fire_at"], moved["recurring"]) == ("2026-12-01T08:30:00+00:00", True)
    recurring = await agent.ok("edit_reminder", reminder_id=daily["id"], every_minutes=720)
    assert recurring["schedule"] == "every 43200 seconds from 2026-11-30T21:00:00+00:00"
    once = await agent.ok("edit_reminder", reminder_id=daily["id"], one_shot=True)
    assert (once["recurring"], once["next_fire_at"]) == (False, "2026-11-30T21:00:00+00:00")

    # A failed edit changes nothing, not even the objective given with it.
    refused = await agent.call("edit_reminder", reminder_id=daily["id"], objective="Nope", in_minutes=0)
    assert refused.status is ToolStatus.INVALID_ARGUMENTS
    clock.advance(timedelta(days=1))
    past = await agent.call(
        "edit_reminder", reminder_id=daily["id"], objective="Nope", at="2026-11-30T12:00:00Z"
    )
    assert past.status is ToolStatus.FAILED and "has already passed" in past.content
    (still,) = (await agent.ok("list_reminders"))["reminders"]
    assert still["objective"] == "Water the ferns"

    both = await agent.call("edit_reminder", reminder_id=daily["id"], cron="@daily", one_shot=True)
    assert "change the timing one way at a time, not cron and one_shot" in both.content
    nothing = await agent.call("edit_reminder", reminder_id=daily["id"])
    assert "nothing to change" in nothing.content


async def test_cancelling_and_the_heartbeat_is_out_of_reach(agent: Agent, store: SQLiteStore) -> None:
    beat = await set_reminder(store, AGENT, "Reflect", interval_trigger(1800, T0), T0, kind=HEARTBEAT_KIND)
    mine = await agent.ok("set_reminder", objective="Mine", in_minutes=30)
    assert [r["id"] for r in (await agent.ok("list_reminders"))["reminders"]] == [mine["id"]]
    for name, extra in [("cancel_reminder", {}), ("edit_reminder", {"objective": "Sleep"})]:
        refused = await agent.call(name, reminder_id=beat.id, **extra)
        assert refused.status is ToolStatus.FAILED
        assert f"you have no reminder {beat.id!r}" in refused.content
    assert (await store.get_reminder(AGENT, beat.id)) == beat
    garbage = await agent.call("cancel_reminder", reminder_id="DROP TABLE reminders")
    assert "you have no reminder 'DROP TABLE reminders'" in garbage.content

    await agent.ok("cancel_reminder", reminder_id=mine["id"])
    assert (await agent.ok("list_reminders"))["reminders"] == []
    again = await agent.call("cancel_reminder", reminder_id=mine["id"].lower())
    assert again.status is ToolStatus.OK  # ids are read case-insensitively; cancelling is idempotent
    cancelled = await store.get_reminder(AGENT, mine["id"])
    assert cancelled is not None and cancelled.trigger == AtTrigger(at=T0 + timedelta(minutes=30))


async def test_goals_are_created_revised_closed_and_listed(agent: Agent, clock: ManualClock) -> None:
    go = await agent.ok("create_goal", description="Learn to play Go")
    assert (go["status"], go["created_at"], go["outcome"]) == ("open", "2026-11-30T09:00:00+00:00", None)
    clock.advance(timedelta(hours=1))
    tea = await agent.ok("create_goal", description="Find Sam a good oolong")
    revised = await agent.ok("update_goal", goal_id=go["id"], description="Learn to play Go on 9x9")
    assert (revised["description"], revised["updated_at"]) == (
        "Learn to play Go on 9x9",
        "2026-11-30T10:00:00+00:00",
    )
    assert [g["id"] for g in (await agent.ok("list_goals"))["goals"]] == [go["id"], tea["id"]]

    unexplained = await agent.call("update_goal", goal_id=tea["id"], status="achieved")
    assert unexplained.status is ToolStatus.INVALID_ARGUMENTS
    assert "say how it ended (outcome) when marking a goal achieved" in unexplained.content
    done = await agent.ok(
        "update_goal", goal_id=tea["id"], status="achieved", outcome="Dong ding, he loved it."
    )
    assert (done["status"], done["outcome"]) == (GoalStatus.ACHIEVED.value, "Dong ding, he loved it.")
    assert [g["id"] for g in (await agent.ok("list_goals"))["goals"]] == [go["id"]]
    everything = await agent.ok("list_goals", include_closed=True)
    assert [g["id"] for g in everything["goals"]] == [go["id"], tea["id"]]

    missing = await agent.call("update_goal", goal_id=new_id(), status="retired", outcome="?")
    assert missing.status is ToolStatus.FAILED and "you have no goal" in missing.content


async def test_what_was_set_elsewhere_is_neither_shown_nor_changed_nor_forgotten_here(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """Provenance: Ann's goal, reminder and fact, set in her DM, are "not yours" to Mallory on
    another channel — she can neither list, edit, cancel, close nor forget them — while Ann
    still sees and changes them where she set them."""
    from persyn.core.records import Sensitivity
    from persyn.store.base import Provenance
    from persyn.tools.activation import Audience, FixedProvenance
    from persyn.tools.builtin.facts import fact_tools

    ann = await store.resolve_person(
        AGENT, Identity(service="chat", channel="dm-ann", speaker_id="ann"), "Ann", "human", T0
    )
    mallory = await store.resolve_person(
        AGENT, Identity(service="chat", channel="lobby", speaker_id="m"), "Mallory", "human", T0
    )

    def agent_for(channel: str, person: str) -> Agent:
        here = Provenance(channel=channel, participant_ids=(person,), sensitivity=Sensitivity.PRIVATE)
        context = OwnToolsContext(
            store=store,
            agent_id=AGENT,
            clock=clock,
            default_action=ReminderAction(person_id=person),
            audience=Audience(channel=channel, present=(person,), agent_id=AGENT),
            run=FixedProvenance(here),
        )
        agent = Agent(store, clock, ReminderAction())
        agent.registry = ToolRegistry(
            [*reminder_tools(context), *goal_tools(context), *fact_tools(context, store)]
        )
        return agent

    in_dm, in_lobby = agent_for("chat:dm-ann", ann.id), agent_for("chat:lobby", mallory.id)
    goal = await in_dm.ok("create_goal", description="Plan Ann's surprise party")
    reminder = await in_dm.ok("set_reminder", objective="Buy the ring", in_minutes=60)
    await in_dm.ok("set_fact", about="Ann", key="door code", value="4711")

    assert (await in_lobby.ok("list_goals", include_closed=True))["goals"] == []
    assert (await in_lobby.ok("list_reminders"))["reminders"] == []
    for name, args in [
        ("update_goal", {"goal_id": goal["id"], "status": "abandoned", "outcome": "no"}),
        ("edit_reminder", {"reminder_id": reminder["id"], "objective": "nothing"}),
        ("cancel_reminder", {"reminder_id": reminder["id"]}),
        ("set_fact", {"about": "Ann", "key": "door code"}),  # forget
    ]:
        refused = await in_lobby.call(name, **args)
        assert refused.status is not ToolStatus.OK and "no " in refused.content, (name, refused.content)
    # Mallory's own note under the same key is hers: Ann's value stays as it was.
    assert (await in_lobby.ok("set_fact", about="Ann", key="door code", value="0000"))["facts"] == {
        "door code": "0000"
    }
    assert (await in_dm.ok("get_facts", about="Ann"))["facts"] == {"door code": "4711"}
    assert [g["id"] for g in (await in_dm.ok("list_goals"))["goals"]] == [goal["id"]]
    assert (await in_dm.ok("cancel_reminder", reminder_id=reminder["id"]))["id"] == reminder["id"]
