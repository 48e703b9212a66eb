"""The agent's own-life tools for reminders and goals (SPEC §4.6, §4.7, §4.8).

Reminders: set, list, edit (objective, time, recurrence, or drop the recurrence) and cancel
the agent's *own* reminders — the heartbeat is a reminder of another kind and these tools
neither show nor touch it. Goals: create, update (revise, achieve, abandon, retire) and list;
calling `create_goal` is the only way a goal comes to exist.

The tools are bound to one activation through `OwnToolsContext`: the store, the agent, the
clock, and whom a reminder addresses by default (the person and channel of the turn that
set it). Times the model gives are ISO 8601; one without a zone is taken as UTC, and every
time the tools report is UTC.

Provenance (ARCHITECTURE §4, turn 2): a goal or reminder is stored with where it was set
(`RunProvenance.written`) and is shown, found or changed only where it may surface
(`Audience.sees`, i.e. `memory.access.may_surface`): what Ann set in her direct messages
is not "yours" to list in front of Mallory elsewhere. What the tools show in a
self-initiated run also narrows what that run writes (`RunProvenance.read`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from persyn.core.clock import Clock
from persyn.core.errors import ToolError
from persyn.core.ids import is_id, parse_id
from persyn.memory.access import Provenanced
from persyn.schedule import (
    REMINDER_KIND,
    AtTrigger,
    Goal,
    GoalStatus,
    Reminder,
    ReminderAction,
    Trigger,
    at_trigger,
    cron_trigger,
    describe_trigger,
    drop_recurrence,
    edit_reminder,
    interval_trigger,
    is_recurring,
    reschedule_reminder,
    set_reminder,
)
from persyn.schedule import create_goal as store_goal
from persyn.store.base import Provenance
from persyn.store.capabilities import ScheduleStore
from persyn.tools.activation import Audience, FixedProvenance, RunProvenance
from persyn.tools.registry import Tool

__all__ = [
    "GoalView",
    "OwnToolsContext",
    "ReminderView",
    "goal_tools",
    "not_the_operators",
    "reminder_tools",
]

_MAX_MINUTES = 10 * 366 * 24 * 60


class _HasProvenance(Protocol):
    @property
    def provenance(self) -> Provenance: ...


_T = TypeVar("_T", bound=_HasProvenance)
_S = TypeVar("_S", covariant=True)  # a context for a richer store serves where a poorer one is asked


@dataclass(frozen=True)
class OwnToolsContext(Generic[_S]):
    store: _S  # what the tools bound to it need of the store (`store/capabilities.py`)
    agent_id: str
    clock: Clock
    # Whom and where a new reminder addresses unless the model says otherwise.
    default_action: ReminderAction = field(default_factory=ReminderAction)
    # Who hears the tools' answers (None: the operator's view, everything).
    audience: Audience | None = None
    run: RunProvenance = field(default_factory=FixedProvenance)

    def sees(self, item: Provenanced) -> bool:
        return self.audience is None or self.audience.sees(item)

    async def shown(self, items: Sequence[_T]) -> list[_T]:
        """The items that may surface here; noted as read by the run."""
        visible = [item for item in items if self.sees(item.provenance)]
        await self.run.read([item.provenance for item in visible])
        return visible


# what the model sees -------------------------------------------------------------------------
class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True)


class ReminderView(_Output):
    id: str
    objective: str
    schedule: str = Field(description="When it fires, e.g. 'once at …' or 'on cron …'.")
    next_fire_at: str = Field(description="The next time it fires (UTC, ISO 8601).")
    recurring: bool
    person_id: str | None = None
    service: str | None = None
    channel: str | None = None

    @classmethod
    def of(cls, reminder: Reminder) -> ReminderView:
        return cls(
            id=reminder.id,
            objective=reminder.objective,
            schedule=describe_trigger(reminder.trigger),
            next_fire_at=reminder.next_fire_at.isoformat(),
            recurring=is_recurring(reminder.trigger),
            person_id=reminder.action.person_id,
            service=reminder.action.service,
            channel=reminder.action.channel,
        )


class ReminderList(_Output):
    reminders: list[ReminderView]


class GoalView(_Output):
    id: str
    description: str
    status: GoalStatus
    created_at: str
    updated_at: str
    outcome: str | None = None

    @classmethod
    def of(cls, goal: Goal) -> GoalView:
        return cls(
            id=goal.id,
            description=goal.description,
            status=goal.status,
            created_at=goal.created_at.isoformat(),
            updated_at=goal.updated_at.isoformat(),
            outcome=goal.outcome,
        )


class GoalList(_Output):
    goals: list[GoalView]


_AT = "Fire once at this time, ISO 8601 (UTC if no zone)."
_IN = "Fire once, this many minutes from now."
_CRON = "Fire on a five-field cron schedule in UTC, e.g. '0 9 * * 1-5' (09:00 on weekdays)."
_EVERY = "Fire every this many minutes."


class _Timing(_Input):
    at: datetime | None = Field(default=None, description=_AT)
    in_minutes: int | None = Field(default=None, ge=1, le=_MAX_MINUTES, description=_IN)
    cron: str | None = Field(default=None, max_length=200, description=_CRON)
    every_minutes: int | None = Field(default=None, ge=1, le=_MAX_MINUTES, description=_EVERY)

    def timings(self) -> list[str]:
        return [
            name for name in ("at", "in_minutes", "cron", "every_minutes") if getattr(self, name) is not None
        ]

    def trigger(self, now: datetime) -> Trigger:
        if self.at is not None:
            return at_trigger(self.at, now)
        if self.in_minutes is not None:
            return at_trigger(now + timedelta(minutes=self.in_minutes), now)
        if self.cron is not None:
            return cron_trigger(self.cron)
        assert self.every_minutes is not None
        every = self.every_minutes * 60
        return interval_trigger(every, now + timedelta(seconds=every))


class SetReminderInput(_Timing):
    objective: str = Field(
        min_length=1,
        max_length=4000,
        description="What to do when it fires, in your own words, e.g. 'Ask Sam how the exam went.'",
    )
    person_id: str | None = Field(
        default=None, description="Whom to address when it fires (default: who you are talking with)."
    )

    @model_validator(mode="after")
    def _one_timing(self) -> Self:
        if len(self.timings()) != 1:
            raise ValueError("give exactly one of at, in_minutes, cron or every_minutes")
        return self


class ReminderIdInput(_Input):
    reminder_id: str = Field(description="The reminder's id, as list_reminders shows it.")


class EditReminderInput(_Timing):
    reminder_id: str = Field(description="The reminder's id, as list_reminders shows it.")
    objective: str | None = Field(default=None, min_length=1, max_length=4000, description="A new objective.")
    one_shot: bool = Field(
        default=False, description="True: drop the recurrence; it fires once more, at its next time."
    )

    @model_validator(mode="after")
    def _one_change_of_time(self) -> Self:
        changes = self.timings() + (["one_shot"] if self.one_shot else [])
        if len(changes) > 1:
            raise ValueError(f"change the timing one way at a time, not {' and '.join(changes)}")
        if not changes and self.objective is None:
            raise ValueError("nothing to change: give an objective, a new time or recurrence, or one_shot")
        return self


class NoInput(_Input):
    pass


class CreateGoalInput(_Input):
    description: str = Field(
        min_length=1, max_length=4000, description="The goal, in your own words, e.g. 'Learn to play Go.'"
    )


class UpdateGoalInput(_Input):
    goal_id: str = Field(description="The goal's id, as list_goals shows it.")
    description: str | None = Field(
        default=None, min_length=1, max_length=4000, description="A revised goal."
    )
    status: Literal["open", "achieved", "abandoned", "retired"] | None = Field(
        default=None, description="'achieved', 'abandoned' or 'retired' closes the goal; 'open' reopens it."
    )
    outcome: str | None = Field(
        default=None, max_length=4000, description="How it went: required when closing the goal."
    )

    @model_validator(mode="after")
    def _closing_says_how(self) -> Self:
        if self.status not in (None, "open") and not (self.outcome or "").strip():
            raise ValueError(f"say how it ended (outcome) when marking a goal {self.status}")
        if self.description is None and self.status is None and self.outcome is None:
            raise ValueError("nothing to change: give a description, a status or an outcome")
        return self


class ListGoalsInput(_Input):
    include_closed: bool = Field(
        default=False, description="Also list achieved, abandoned and retired goals."
    )


# the tools -------------------------------------------------------------------------------------
def reminder_tools(context: OwnToolsContext[ScheduleStore]) -> list[Tool[Any, Any]]:
    """set_reminder, list_reminders, edit_reminder and cancel_reminder, bound to `context`."""
    store, agent_id, clock = context.store, context.agent_id, context.clock

    async def own(reminder_id: str) -> Reminder:
        found = None
        if is_id(reminder_id):
            found = await store.get_reminder(agent_id, parse_id(reminder_id))
        if found is None or found.kind != REMINDER_KIND or not context.sees(found.provenance):
            raise ToolError(f"you have no reminder {reminder_id!r}; list_reminders shows yours")
        await context.run.read([found.provenance])
        return found

    async def set_(arguments: SetReminderInput) -> ReminderView:
        now = clock.now()
        action = context.default_action
        if arguments.person_id is not None:
            person = await store.get_person(agent_id, parse_id(arguments.person_id, what="person id"))
            if person is None:
                raise ToolError(f"there is no contact {arguments.person_id!r}")
            action = ReminderAction(person_id=person.id)
        trigger = arguments.trigger(now)
        return ReminderView.of(
            await set_reminder(
                store,
                agent_id,
                arguments.objective,
                trigger,
                now,
                action=action,
                provenance=await context.run.written(),
            )
        )

    async def list_(arguments: NoInput) -> ReminderList:
        found = await context.shown(await store.list_reminders(agent_id, kind=REMINDER_KIND))
        return ReminderList(reminders=[ReminderView.of(reminder) for reminder in found])

    async def edit(arguments: EditReminderInput) -> ReminderView:
        now = clock.now()
        current = await own(arguments.reminder_id)
        trigger = arguments.trigger(now) if arguments.timings() else None  # refuse before writing
        if arguments.objective is not None:
            current = await store.update_reminder(agent_id, current.id, now, objective=arguments.objective)
        if arguments.one_shot:
            current = await drop_recurrence(store, agent_id, current.id, now)
        elif isinstance(trigger, AtTrigger):  # a new time: a recurring reminder carries on after it
            current = await reschedule_reminder(store, agent_id, current.id, trigger.at, now)
        elif trigger is not None:
            current = await edit_reminder(store, agent_id, current.id, now, trigger=trigger)
        return ReminderView.of(current)

    async def cancel(arguments: ReminderIdInput) -> ReminderView:
        current = await own(arguments.reminder_id)
        return ReminderView.of(await store.cancel_reminder(agent_id, current.id, clock.now()))

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="set_reminder",
            description=(
                "Set yourself a reminder: when it fires you wake with its objective and act on "
                "it. Give exactly one of at, in_minutes, cron (UTC) or every_minutes."
            ),
            input_model=SetReminderInput,
            output_model=ReminderView,
            handler=set_,
        ),
        Tool(
            name="list_reminders",
            description="List the reminders you have set, soonest first.",
            input_model=NoInput,
            output_model=ReminderList,
            handler=list_,
        ),
        Tool(
            name="edit_reminder",
            description=(
                "Change one of your reminders: its objective; its next time (at or in_minutes; a "
                "recurring one then carries on as before); its recurrence (cron or every_minutes); "
                "or one_shot=true to stop it recurring after its next firing."
            ),
            input_model=EditReminderInput,
            output_model=ReminderView,
            handler=edit,
        ),
        Tool(
            name="cancel_reminder",
            description="Cancel one of your reminders: it will not fire again.",
            input_model=ReminderIdInput,
            output_model=ReminderView,
            handler=cancel,
        ),
    ]
    return tools


def goal_tools(context: OwnToolsContext[ScheduleStore]) -> list[Tool[Any, Any]]:
    """create_goal, update_goal and list_goals, bound to `context`."""
    store, agent_id, clock = context.store, context.agent_id, context.clock

    async def create(arguments: CreateGoalInput) -> GoalView:
        provenance = await context.run.written()
        return GoalView.of(
            await store_goal(store, agent_id, arguments.description, clock.now(), provenance=provenance)
        )

    async def update(arguments: UpdateGoalInput) -> GoalView:
        goal = None
        if is_id(arguments.goal_id):
            goal = await store.get_goal(agent_id, parse_id(arguments.goal_id))
        if goal is None or not context.sees(goal.provenance):
            raise ToolError(f"you have no goal {arguments.goal_id!r}; list_goals shows yours")
        await context.run.read([goal.provenance])
        updated = await store.update_goal(
            agent_id,
            goal.id,
            clock.now(),
            description=arguments.description,
            status=None if arguments.status is None else GoalStatus(arguments.status),
            outcome=arguments.outcome,
        )
        return GoalView.of(updated)

    async def list_(arguments: ListGoalsInput) -> GoalList:
        statuses = None if arguments.include_closed else [GoalStatus.OPEN]
        found = await context.shown(await store.list_goals(agent_id, statuses=statuses))
        return GoalList(goals=[GoalView.of(goal) for goal in found])

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="create_goal",
            description=(
                "Set yourself a goal to pursue over time (the only way you gain one). Your open "
                "goals are in front of you in every conversation and in your reflections."
            ),
            input_model=CreateGoalInput,
            output_model=GoalView,
            handler=create,
        ),
        Tool(
            name="update_goal",
            description=(
                "Revise one of your goals, or close it as achieved, abandoned or retired, saying "
                "how it ended (outcome)."
            ),
            input_model=UpdateGoalInput,
            output_model=GoalView,
            handler=update,
        ),
        Tool(
            name="list_goals",
            description="List your open goals, oldest first (include_closed=true for the closed ones too).",
            input_model=ListGoalsInput,
            output_model=GoalList,
            handler=list_,
        ),
    ]
    return tools


_CLOSED_GOAL = ("achieved", "abandoned", "retired")


def not_the_operators(name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why the operator may not run tool `name` with `arguments` as the agent (`persyn tools
    call`), or None. The agent's goals and reminders are its own intent: a goal comes to exist
    only by its own `create_goal` (SPEC §4.8: "there is no other authoring path") and is
    revised or reopened only by it; reminders are the ones it set (§4.7) and fire as its own
    objective. The operator may list both, close a goal (a status that ends it, with how it
    ended) and cancel a reminder (`persyn reminders cancel`)."""
    if name == "create_goal":
        return (
            "create_goal is the agent's own: a goal exists only when the agent sets it itself "
            "(SPEC §4.8); `persyn goals list` shows its goals"
        )
    if name == "update_goal" and (
        arguments.get("description") is not None or arguments.get("status") not in _CLOSED_GOAL
    ):
        return (
            "revising or reopening a goal is the agent's own (SPEC §4.8); the operator may only "
            'close one: {"goal_id": ..., "status": "achieved"|"abandoned"|"retired", "outcome": ...}'
        )
    if name in ("set_reminder", "edit_reminder"):
        return (
            f"{name} is the agent's own: its reminders are the ones it sets (SPEC §4.7) and fire as its "
            "own objective; `persyn reminders list` shows them and `persyn reminders cancel` cancels one"
        )
    return None
