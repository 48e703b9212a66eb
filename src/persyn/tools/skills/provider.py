"""Skills (`tools/providers.py`): `use_skill`, whose description lists the agent's skills by name
and description, and `write_skill`, when `[skills]` is enabled."""

from __future__ import annotations

import logging
from typing import Any

from persyn.tools.providers import ToolProvider, ToolScope
from persyn.tools.registry import Tool
from persyn.tools.skills.library import SkillLibrary, skill_tools

__all__ = ["SKILLS"]

_log = logging.getLogger(__name__)


def _skills(scope: ToolScope) -> list[Tool[Any, Any]]:
    library = scope.service(SkillLibrary)
    if library is None:
        return []
    try:
        return skill_tools(library)
    except OSError as exc:  # an unreadable or read-only skills folder: answer without skills
        _log.warning("skills are unavailable: %s", exc)
        return []


SKILLS = ToolProvider("skills", _skills)
