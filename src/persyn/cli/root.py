"""The `persyn` application: the root options, every command group registered, and `main`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from persyn.cli.commands import (
    agents,
    autonomy,
    channels,
    console,
    contacts,
    conversations,
    doctor,
    evals,
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
from persyn.core.errors import PersynError
from persyn.core.messages import lone_surrogate
from persyn.core.times import parse_time
from persyn.present.render import error_text

__all__ = ["app", "main", "undecodable_argument"]

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
    evals,
    store,
    guardrails,
    web,
):
    group.register(app)


def undecodable_argument(args: Sequence[str]) -> str | None:
    """What is wrong with the first of `args` (the command line after `persyn`) that is not
    valid UTF-8, or None. Python hands such bytes over as lone surrogates, which no file, store
    or terminal takes: refused here once, for every command, before anything runs."""
    for index, arg in enumerate(args):
        if lone_surrogate(arg) is None:
            continue
        option, equals, value = arg.partition("=")
        if not (arg.startswith("--") and equals and lone_surrogate(option) is None):
            option, value = "", arg
        shown = repr(
            value.encode("utf-8", "surrogateescape" if _escaped_bytes(value) else "backslashreplace")
        )
        if option:
            where = f"the value of {option}"
        elif index > 0 and args[index - 1].startswith("-") and lone_surrogate(args[index - 1]) is None:
            where = f"argument {index + 1} (after {args[index - 1]})"
        else:
            where = f"argument {index + 1}"
        return f"{where} is not valid UTF-8: {shown}; pass text as UTF-8"
    return None


def _escaped_bytes(arg: str) -> bool:
    """Whether every surrogate in `arg` stands for an undecodable byte (U+DC80..U+DCFF)."""
    return all("\udc80" <= char <= "\udcff" for char in arg if "\ud800" <= char <= "\udfff")


def main() -> None:
    bad = undecodable_argument(sys.argv[1:])
    if bad is not None:
        typer.secho(f"error: {bad}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    try:
        app()
    except (PersynError, OSError) as exc:
        # OSError: the machine refused (a full disk, a read-only directory): say which file.
        typer.secho(f"error: {error_text(exc)}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
