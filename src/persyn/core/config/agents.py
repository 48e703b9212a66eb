"""`[[agents]]`: each agent's seed persona and its own models.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from persyn.core.config.models import ModelChoice, check_model_choice, check_task_keys
from persyn.core.ids import is_id
from persyn.core.section import Section

__all__ = ["AgentConfig"]


class AgentConfig(Section):
    """The seed persona: day-zero voice that memory soon augments (SPEC §1)."""

    name: str = Field(
        min_length=1, max_length=64, description="How the agent is called (1 to 64 characters)."
    )
    id: str = Field(description="ULID: the agent's identity; never change it once it has memories.")
    disposition: str = Field(
        default="Curious, candid and warm; prefers honesty to agreement.",
        description="Its temperament, in its own words.",
    )
    objectives: list[str] = Field(
        default_factory=list[str],
        description='What it cares about, e.g. ["learn what my operator is building"].',
    )
    rules: list[str] = Field(
        default_factory=list[str],
        description='Standing rules as conditionals, e.g. ["if asked for secrets, then decline"].',
    )
    models: dict[str, ModelChoice] = Field(
        default_factory=dict[str, ModelChoice],
        description="This agent's own models by task (or `default`), over [models].",
        examples=[{"respond": "anthropic:claude-sonnet-4-6"}],
    )

    @field_validator("id")
    @classmethod
    def _ulid(cls, value: str) -> str:
        if not is_id(value):
            raise ValueError(f"{value!r} is not a ULID (26 Crockford base32 characters)")
        return value.upper()

    @field_validator("models")
    @classmethod
    def _known_tasks(cls, value: dict[str, ModelChoice]) -> dict[str, ModelChoice]:
        for choice in value.values():
            check_model_choice(choice)
        return check_task_keys(value)
