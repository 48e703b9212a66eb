"""The `persyn` application: the root options, every command group registered, and `main`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from persyn.cli import (
    agents,
    autonomy,
    channels,
    console,
    contacts,
    conversations,
    doctor,
    graph,
    guardrails,
    memory,
    people,
    sandbox,
    serve,
    setup,
    skills,
    store,
    tools,
    traces,
    usage,
    web,
)
from persyn.cli.context import NOW_HELP, CliContext, HomeOption
from persyn.cli.help import command_group
from persyn.cli.render import error_text
from persyn.cli.times import parse_time
from persyn.core.errors import PersynError

__all__ = ["app", "main"]

app = command_group(
    name="persyn",
    help=(
        "Persyn runs autonomous agents with a persistent autobiographical memory.\n\n"
        "Start with `persyn init --name NAME`, then `persyn chat`. Data and configuration "
        "live under PERSYN_HOME (default ~/.persyn); every setting in persyn.toml can be "
        "overridden by a PERSYN_SECTION__KEY environment variable."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    ctx: typer.Context,
    home: HomeOption = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help=NOW_HELP,
            show_default=False,
        ),
    ] = None,
) -> None:
    ctx.obj = CliContext(home=home, moved_to=None if now is None else parse_time(now, "--now"))


# The order `persyn --help` lists commands and groups in.
for group in (
    setup,
    agents,
    memory,
    serve,
    console,
    usage,
    traces,
    conversations,
    contacts,
    channels,
    people,
    graph,
    tools,
    sandbox,
    skills,
    autonomy,
    doctor,
    store,
    guardrails,
    web,
):
    group.register(app)


def main() -> None:
    try:
        app()
    except (PersynError, OSError) as exc:
        # OSError: the machine refused (a full disk, a read-only directory): say which file.
        typer.secho(f"error: {error_text(exc)}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
