"""`persyn init`: making a deployment, or adding an agent to one."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import CliContext, HomeOption
from persyn.present.render import echo

__all__ = ["register"]


def init(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option("--name", "-n", help="The new agent's name.")] = None,
    home: HomeOption = None,
) -> None:
    """Create a deployment with one agent, or add another agent to an existing one.

    Agents in one deployment share infrastructure (database, model servers) but never
    memories: every stored row is namespaced by agent id. The new persyn.toml shows every
    key with its default and what it means; its models are "auto": a hosted model when an
    API key is set, else a model server already running on this machine, else the bundled
    tiny model (`persyn doctor` says which)."""
    from persyn.core.config import home_from_env
    from persyn.ops.init_home import init_home

    cli = CliContext.of(ctx)
    root = home_from_env(home or cli.home)
    result = init_home(root, name)
    if result.created_file:
        echo(f"Created {result.path}")
    else:
        echo(f"Added an agent to {result.path}")
    echo(f"Agent {result.agent.name} ({result.agent.id}) is ready. Talk to it with:")
    home_flag = "" if home is None and cli.home is None else f" --home {root}"
    echo(f"  persyn{home_flag} chat --agent {result.agent.name}")
    if result.created_file:
        echo(
            f'Its model is "auto" ([models] default); `persyn{home_flag} doctor` says which model that is here.'
        )


def register(app: typer.Typer) -> None:
    app.command()(init)
