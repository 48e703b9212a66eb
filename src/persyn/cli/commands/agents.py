"""`persyn agents`: the agents configured in persyn.toml."""

from __future__ import annotations

import typer

from persyn.cli.context import CliContext, JsonOption
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

__all__ = ["register"]


agents_app = command_group("The agents of this deployment.")


@agents_app.command("list")
def agents_list(
    ctx: typer.Context,
    as_json: JsonOption = False,
) -> None:
    """List the agents configured in persyn.toml (deployment-wide: every agent)."""
    from persyn.core.config import CONFIG_FILE

    cli = CliContext.of(ctx)
    settings = cli.settings
    rows = [{"name": a.name, "id": a.id, "disposition": a.disposition} for a in settings.agents]
    if as_json:
        echo(dump_json(rows))
        return
    if not rows:
        echo(f"No agents yet in {settings.home / CONFIG_FILE}. Create one: persyn init --name NAME")
        return
    for row in rows:
        echo(f"{one_line(row['name']):<20} {row['id']}")


def register(app: typer.Typer) -> None:
    app.add_typer(agents_app, name="agents")
