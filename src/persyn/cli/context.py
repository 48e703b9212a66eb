"""What every command shares: the `CliContext` the root callback puts in the Typer context,
the common options, and the one way to run a coroutine at this edge.

The context holds the deployment directory and the clock the whole invocation runs on (the
system's, or one moved by the root `--now`); settings are loaded the first time a command asks
for them, so `persyn --help` and `persyn init` never read a configuration file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from persyn.cli.log_filter import install_log_filters
from persyn.core.clock import Clock, OffsetClock, SystemClock
from persyn.core.errors import InputError
from persyn.core.times import parse_time
from persyn.present.render import visible

if TYPE_CHECKING:
    from persyn.core.config import AgentConfig, Settings

__all__ = [
    "AgentOption",
    "CliContext",
    "HomeOption",
    "JsonOption",
    "NowOption",
    "fail",
    "run",
]

T = TypeVar("T")

HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home", help="Deployment directory (default: $PERSYN_HOME or ~/.persyn).", show_default=False
    ),
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent", "-a", help="Agent name or id (optional when there is only one).", show_default=False
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
NOW_HELP = (
    "Run as if it were this ISO time (the clock then moves on in real time): for trying "
    "reminders and the heartbeat, and for tests."
)
NowOption = Annotated[
    str | None,
    typer.Option("--now", help=f"{NOW_HELP} The same as `persyn --now`.", show_default=False),
]


@dataclass
class CliContext:
    """One invocation of `persyn`: where the deployment is and what time it is."""

    home: Path | None = None
    moved_to: datetime | None = None  # the root --now, if given

    @classmethod
    def of(cls, ctx: typer.Context) -> CliContext:
        found = ctx.find_object(CliContext)
        return found if found is not None else ctx.ensure_object(CliContext)

    @cached_property
    def clock(self) -> Clock:
        """The clock of this invocation: the system's, or shifted to `--now` (and moving on in
        real time from there). One instance, so every reading in a command agrees."""
        return OffsetClock(self.moved_to) if self.moved_to is not None else SystemClock()

    def now(self) -> datetime:
        return self.clock.now()

    def move_to(self, value: str | None) -> None:
        """A command's own `--now`, given after its name: exactly the root option."""
        if value is None:
            return
        moved = parse_time(value, "--now")
        if self.moved_to is not None and moved != self.moved_to:
            raise InputError(f"--now given twice: {self.moved_to.isoformat()!r} and {value!r}; give it once")
        self.moved_to = moved
        self.__dict__.pop("clock", None)  # a clock made before now was the unmoved one

    def since(self, value: str | None, option: str = "--since") -> datetime | None:
        """A `--since` value (ISO time or span back from this invocation's now)."""
        return None if value is None else parse_time(value, option, now=self.now())

    @cached_property
    def settings(self) -> Settings:
        """persyn.toml and the environment, read once; logging configured to match."""
        from persyn.core.config import load_settings

        settings = load_settings(self.home)
        logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
        # One line per condition until it changes; tracebacks only at debug (cli/log_filter.py).
        install_log_filters(tracebacks=settings.log_level == "debug")
        return settings

    def agent(self, name: str | None) -> AgentConfig:
        return self.settings.agent(name)

    def preflight(self) -> None:
        """Before a runtime starts: its database files must be databases (ops/doctor/checks.py)."""
        from persyn.ops.doctor.checks import preflight

        preflight(self.settings)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """The one `asyncio.run` of a command."""
    return asyncio.run(coroutine)


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {visible(message)}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)
