"""The heartbeat's self-assessment (SPEC §4.7): the agent reviews its recent memories and open
goals through a counter-perspective template (`templates/self_assessment.md`) and chooses
one thing to do — or to rest, with a reason.

The assessment is structured output (task `reflect`, stage `heartbeat:assess`); a model that
fails or returns nothing usable degrades to resting, stated as such — a broken model never
turns into autonomous activity.

What it reviews (`review_material`) is only what may come to mind with nobody present
(`memory.access`): restricted records formed with others never reach the prompt. What the
beat then writes may surface at most where what it reviewed may (`Review.provenance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from string import Template
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from persyn.cognition.goals import reflective_view
from persyn.core.clock import friendly_datetime
from persyn.core.config import AgentConfig, Task
from persyn.core.errors import ModelError
from persyn.core.records import MemoryRecord
from persyn.gateway.base import Completion, Prompt, UserTurn
from persyn.memory.access import derived_provenance
from persyn.store.base import Goal, GoalStatus, Provenance, Store
from persyn.store.capabilities import capability
from persyn.store.ports.memory import MemoryPort
from persyn.store.ports.schedule import SchedulePort

__all__ = ["Intention", "Review", "SelfAssessment", "assess", "render_assessment_prompt", "review_material"]

_PAGE = 100
_MAX_PAGES = 20  # records scanned for the newest reviewable ones: at most 2,000

Intention = Literal["revise_goals", "pursue_goal", "read_up", "message_contact", "rest"]


class SelfAssessment(BaseModel):
    """The heartbeat's look at itself (SPEC §4.7): what it sees and the one thing it will do."""

    model_config = ConfigDict(frozen=True)

    patterns: str = Field(description="What patterns appear in my recent memories, in a sentence or two.")
    serves_objectives: bool = Field(description="Whether those patterns serve my objectives.")
    intention: Intention = Field(description="The one thing to do now.")
    plan: str = Field(description="What exactly I will do (or why I rest), in one or two sentences.")


class _Gateway(Protocol):
    async def complete(
        self, task: Task, prompt: Prompt, *, output: type[BaseModel] | None = None, stage: str | None = None
    ) -> Completion: ...


@dataclass(frozen=True)
class Review:
    """What a beat reviews, and where what it concludes from it may surface."""

    records: Sequence[MemoryRecord]
    goals: Sequence[Goal]
    provenance: Provenance


async def review_material(
    store: Store,
    agent_id: str,
    home: str,
    groups: Sequence[Sequence[str]],
    *,
    records: int,
    goals: int,
) -> Review:
    """The newest `records` memories and the oldest `goals` open goals the agent may think
    of on its own (`reflective_view`), and the provenance of the beat that reads them
    (`derived_provenance`, `home` being the beat's channel).

    The provenance is the meet of what was reviewed, nothing more: what the beat's later
    steps recall (its earlier reflections included) narrows the run when it is read
    (`runtime.background.autonomy.narrow_run` through the context sources and tools), so a beat that
    reviewed only Ann's private memories may still write to Ann where they formed, and one
    that reviewed nothing it could not say to anyone writes for everyone.

    A store without memory or without goals (`store/capabilities.py`) has none to review."""
    memory, schedule = capability(store, MemoryPort), capability(store, SchedulePort)
    found: list[MemoryRecord] = []
    before: str | None = None
    for _ in range(_MAX_PAGES):
        if memory is None:
            break
        page = await memory.list_records(agent_id, limit=_PAGE, before_id=before)
        found.extend(r for r in page if reflective_view(r, home, groups, agent_id))
        if len(found) >= records or len(page) < _PAGE:
            break
        before = page[-1].id
    stored_goals = (
        [] if schedule is None else await schedule.list_goals(agent_id, statuses=[GoalStatus.OPEN], limit=200)
    )
    open_goals = [g for g in stored_goals if reflective_view(g.provenance, home, groups, agent_id)][:goals]
    kept = found[:records]
    sources = [*kept, *(g.provenance for g in open_goals)]
    return Review(records=kept, goals=open_goals, provenance=derived_provenance(sources, home))


@cache
def _template() -> Template:
    text = resources.files("persyn.cognition").joinpath("templates", "self_assessment.md").read_text("utf-8")
    return Template(text)


def render_assessment_prompt(
    agent: AgentConfig, records: Sequence[MemoryRecord], goals: Sequence[Goal], now: datetime
) -> Prompt:
    memories = (
        "\n".join(f"- {r.created_at:%Y-%m-%d %H:%M} [{r.channel}] {r.summary}" for r in records)
        or "(none yet)"
    )
    open_goals = "\n".join(f"- ({g.id}) {g.description}" for g in goals) or "(none)"
    objectives = "\n".join(f"- {o}" for o in agent.objectives) or "(none set: my disposition guides me)"
    system = _template().safe_substitute(
        agent=agent.name, objectives=objectives, goals=open_goals, records=memories
    )
    return Prompt(
        system=system,
        items=(UserTurn(text=f"It is {friendly_datetime(now)}. Assess yourself, then choose."),),
    )


async def assess(
    gateway: _Gateway,
    agent: AgentConfig,
    records: Sequence[MemoryRecord],
    goals: Sequence[Goal],
    now: datetime,
) -> SelfAssessment:
    prompt = render_assessment_prompt(agent, records, goals, now)
    try:
        completion = await gateway.complete(
            Task.REFLECT, prompt, output=SelfAssessment, stage="heartbeat:assess"
        )
    except ModelError as exc:
        return SelfAssessment(
            patterns="(I could not reflect just now.)",
            serves_objectives=True,
            intention="rest",
            plan=f"Resting: my self-assessment failed ({exc}).",
        )
    if not isinstance(completion.output, SelfAssessment):  # pragma: no cover - the gateway validates
        return SelfAssessment(
            patterns="", serves_objectives=True, intention="rest", plan="Resting: no assessment."
        )
    return completion.output
