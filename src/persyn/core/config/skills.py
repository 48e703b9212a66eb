"""`[skills]`: Agent Skills folders the agent reads, and those it may write.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = ["AUTHORING_SKILL", "SkillsConfig"]


AUTHORING_SKILL = "skill-authoring"  # ships with persyn, protected
_SKILL_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


class SkillsConfig(Section):
    """Agent Skills (folders with a SKILL.md): named in the prompt, loaded when used."""

    enabled: bool = Field(default=True, description="Offer skills (`use_skill`, `write_skill`).")
    directories: list[str] = Field(
        default_factory=lambda: ["skills"],
        description=(
            "Deployment-wide skill directories, each holding one folder per skill (relative paths are "
            "under the deployment directory)."
        ),
    )
    agent_directories: dict[str, list[str]] = Field(
        default_factory=dict[str, list[str]],
        description="Further skill directories per agent, by agent name, e.g. { Ada = ['skills-ada'] }.",
    )
    protected: list[str] = Field(
        default_factory=lambda: [AUTHORING_SKILL],
        description=(
            "Skills that may be used but not changed: an edit or deletion is undone (the version first "
            "seen is restored) and recorded."
        ),
    )
    write: bool = Field(
        default=True,
        description="Offer `write_skill`: the agent may author new skills (into data/skills/AGENT_ID).",
    )
    max_file_chars: int = Field(
        default=20_000, ge=500, le=1_000_000, description="Longest skill file the agent is shown."
    )
    catalogue_chars: int = Field(
        default=3000,
        ge=500,
        le=100_000,
        description=(
            "About how many characters the list of skills in the prompt may take; past it each "
            "description is shortened to an equal share (names are always listed)."
        ),
    )

    @field_validator("protected")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _SKILL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a skill name (lowercase letters, digits, single hyphens)")
        return value
