"""`persyn people`: observations about people, and the dossiers made of them."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from persyn.cli.commands.contacts import ContactArgument
from persyn.cli.context import AgentOption, CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

__all__ = ["register"]


people_app = command_group("What the agent has observed about people, and its briefing (dossier) on each.")


@people_app.command("observations")
def people_observations(
    ctx: typer.Context,
    person_id: ContactArgument,
    agent: AgentOption = None,
    history: Annotated[
        bool, typer.Option("--history", help="Also show how each observation changed, and why.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Observations about a person (extracted after each conversation closes)."""
    from persyn.ops.history import person_observations

    cli = CliContext.of(ctx)
    settings = cli.settings
    person, observations, changes, _ = run(person_observations(settings, settings.agent(agent), person_id))
    if as_json:
        payload: dict[str, Any] = {"observations": [o.model_dump(mode="json") for o in observations]}
        if history:
            payload["history"] = [c.model_dump(mode="json") for c in changes]
        echo(dump_json(payload))
        return
    echo(f"{one_line(person.display_name)} ({person.id})")
    if not observations:
        echo("  nothing observed yet")
    for observation in observations:
        echo(
            f"  [{one_line(observation.kind)}] {one_line(observation.value)}  ({observation.observed_at:%Y-%m-%d})"
        )
    if history:
        echo("history:")
        for change in changes:
            echo(
                f"  {change.at:%Y-%m-%d %H:%M} {one_line(change.action)}: {change.before!r} -> "
                f"{change.after!r} ({one_line(change.reason)})"
            )


@people_app.command("dossier")
def people_dossier(
    ctx: typer.Context,
    person_id: ContactArgument,
    agent: AgentOption = None,
) -> None:
    """The agent's briefing on a person, as last synthesised from their observations."""
    from persyn.ops.history import person_observations

    cli = CliContext.of(ctx)
    settings = cli.settings
    person, observations, _, dossier = run(person_observations(settings, settings.agent(agent), person_id))
    if dossier:
        echo(dossier)
    elif observations:
        echo(
            f"No dossier on {one_line(person.display_name)} yet: it is written after their next conversation closes."
        )
    else:
        echo(f"Nothing is known about {one_line(person.display_name)} yet.")


def register(app: typer.Typer) -> None:
    app.add_typer(people_app, name="people")
