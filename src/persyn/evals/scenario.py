"""The continuity week as data (issue 38): days of steps, the scratch deployment's settings
and the `test:script` rules the scripted double answers by in mechanics mode.

The shipped scenario is `scenarios/week.toml`; `--scenario FILE` replaces it with another
of the same shape. A scenario says what happens, never what a checker should conclude: its
`probe` names only tell a checker which exchange of the store to read.
"""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from persyn.core.errors import InputError

__all__ = ["Criteria", "Day", "Scenario", "Step", "default_scenario_text", "load_scenario"]

SCRIPT_PLACEHOLDER = "{script}"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Step(_Frozen):
    """One thing that happens in a day; exactly one of `say`, `restart`, `heartbeat`, `wait`
    (`reminder`: until the reminder loop has run; `agents`: until the agents' exchange is
    quiet). A `say` on `channel = "web"` is said through the daemon's real web API with
    the speaker's own key; on any other channel through `persyn send --channel`."""

    say: str | None = Field(default=None, min_length=1, max_length=4000)
    who: str = Field(default="operator", min_length=1, max_length=80)
    channel: str = Field(default="web", min_length=1, max_length=80, pattern=r"^[A-Za-z0-9_.-]+$")
    probe: str | None = Field(default=None, min_length=1, max_length=60)
    restart: bool = False
    heartbeat: Literal["delete"] | None = None
    # With `heartbeat`: whose heartbeat (default: the scenario's agent; another agent of the
    # deployment is a sabotage: the agent's own heartbeat is left beating).
    agent: str | None = Field(default=None, min_length=1, max_length=80)
    wait: Literal["reminder", "agents"] | None = None
    timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    # With `restart`: settings changed from the restart on (a sabotage, or an upgrade);
    # "{work}" in a value is the eval's scratch directory.
    config: dict[str, str] = Field(default_factory=dict[str, str])

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        chosen = [self.say is not None, self.restart, self.heartbeat is not None, self.wait is not None]
        if sum(chosen) != 1:
            raise ValueError("a step does exactly one of: say, restart, heartbeat, wait")
        if self.agent is not None and self.heartbeat is None:
            raise ValueError("`agent` names whose heartbeat a heartbeat step deletes; this step has none")
        return self

    @property
    def action(self) -> str:
        if self.say is not None:
            return "say"
        if self.restart:
            return "restart"
        if self.heartbeat is not None:
            return "heartbeat"
        return "wait"


class Day(_Frozen):
    steps: tuple[Step, ...] = ()


class Criteria(_Frozen):
    """Thresholds a checker applies (what counts as memorable), not expected results."""

    memorable_importance: int = Field(default=7, ge=1, le=10)
    first_meeting_with: str = Field(default="Alice", min_length=1)


class Scenario(_Frozen):
    name: str = Field(min_length=1, max_length=80)
    agent: str = Field(default="Wren", min_length=1, max_length=80)
    # Other agents of the scratch deployment (`persyn init --name`): someone to talk to.
    others: tuple[str, ...] = ()
    start_hour: int = Field(default=9, ge=0, le=23)
    config: dict[str, str] = Field(default_factory=dict[str, str])
    criteria: Criteria = Criteria()
    rules: tuple[dict[str, Any], ...] = ()
    days: tuple[Day, ...] = Field(min_length=1)

    def environment(self, script_path: Path) -> dict[str, str]:
        """The `PERSYN_SECTION__KEY` variables of `[config]`, `{script}` naming the rules file."""
        spec = f"test:script@{script_path}"
        return {
            "PERSYN_" + key.upper().replace(".", "__"): value.replace(SCRIPT_PLACEHOLDER, spec)
            for key, value in self.config.items()
        }

    def rules_json(self) -> str:
        return json.dumps({"rules": list(self.rules)}, indent=1)

    def probes(self) -> dict[str, Step]:
        return {step.probe: step for day in self.days for step in day.steps if step.probe}


def default_scenario_text() -> str:
    return resources.files("persyn.evals").joinpath("scenarios/week.toml").read_text(encoding="utf-8")


def load_scenario(path: Path | None = None) -> Scenario:
    """The shipped week, or the scenario in `path`; a bad file is an `InputError` naming it."""
    where = "the shipped week" if path is None else repr(str(path))
    try:
        text = default_scenario_text() if path is None else path.read_text(encoding="utf-8")
        return Scenario.model_validate(tomllib.loads(text))
    except OSError as exc:
        raise InputError(f"cannot read the scenario {where}: {exc}") from exc
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise InputError(f"invalid scenario {where}: {exc}") from exc
