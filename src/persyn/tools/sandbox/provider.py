"""`run_code` (`tools/providers.py`): a task delegated to the sandbox agent, only when a sandbox
provider is present (no host fallback), in the workspace of the compartment this run's provenance
allows (`tools/sandbox/workspace.py`), with the skills this activation may use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from persyn.tools.providers import ToolProvider, ToolScope
from persyn.tools.registry import Tool
from persyn.tools.sandbox.service import SandboxService
from persyn.tools.skills.library import SkillLibrary

__all__ = ["SANDBOX"]


def _run_code(scope: ToolScope) -> list[Tool[Any, Any]]:
    sandbox = scope.service(SandboxService)
    if sandbox is None:
        return []
    library = scope.service(SkillLibrary)

    def skill_folders() -> dict[str, Path]:
        """The skills this activation may use, read when a `run_code` task starts (after
        protected ones were restored), so their scripts run inside the sandbox."""
        return {} if library is None else {skill.name: skill.folder for skill in library.scan()}

    code = sandbox.tool_for(
        scope.agent.id,
        scope.run.written,
        own=scope.kind != "message",
        run_id=scope.event_id,
        skills=skill_folders,
    )
    return [] if code is None else [code]


SANDBOX = ToolProvider("sandbox", _run_code)
