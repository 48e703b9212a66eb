"""The heartbeat's self-assessment (SPEC §4.7): the agent reviews its recent memories and open
goals through a counter-perspective template (`templates/self_assessment.md`) and chooses
one thing to do — or to rest, with a reason.

The assessment is structured output (task `reflect`, stage `heartbeat:assess`); a model that
fails or returns nothing usable degrades to resting, stated as such — a broken model never
turns into autonomous activity.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from importlib import resources
from string import Template
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from persyn.core.clock import friendly_datetime
from persyn.core.config import AgentConfig, Task
from persyn.core.errors import ModelError
from persyn.core.records import MemoryRecord
from persyn.gateway.base import Completion, Prompt, UserTurn
from persyn.store.base import Goal

__all__ = ["Intention", "SelfAssessment", "assess", "render_assessment_prompt"]

Intention = Literal["revise_goals", "pursue_goal", "read_up", "message_contact", "rest"]


class SelfAssessment(BaseModel):
    patterns: str = Field(description="What patterns appear in my recent memories, in a sentence or two.")
    serves_objectives: bool = Field(description="Whether those patterns serve my objectives.")
    intention: Intention = Field(description="The one thing to do now.")
    plan: str = Field(description="What exactly I will do (or why I rest), in one or two sentences.")


class _Gateway(Protocol):
    async def complete(
        self, task: Task, prompt: Prompt, *, output: type[BaseModel] | None = None, stage: str | None = None
    ) -> Completion: ...


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
