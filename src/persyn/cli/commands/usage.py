"""`persyn usage`: the usage ledger, summed."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import CliContext, JsonOption
from persyn.present.render import dump_json, echo

__all__ = ["register"]


def usage(
    ctx: typer.Context,
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="Group by: stage, model, channel, conversation, agent or trigger (a message, heartbeat, reminder, consolidation...).",
        ),
    ] = "stage",
    since: Annotated[
        str | None, typer.Option("--since", help="ISO time or a span like 30m, 12h, 7d.")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Only this agent's calls (name or id); default: every agent's."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Sum the usage ledger exactly once (records are deduplicated by id).

    Cost comes from the [prices] table at the time of each call; unpriced calls are counted
    but not costed."""
    from persyn.usage.ledger import render_summary, summarize

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = None if agent is None else settings.agent(agent)
    report = summarize(
        settings.usage_log_path,
        by=by,
        since=cli.since(since),
        agent_id=None if chosen is None else chosen.id,
    )
    if as_json:
        echo(dump_json(report.model_dump(mode="json")))
        return
    if chosen is not None:
        echo(f"{chosen.name}'s usage ({chosen.id}):")
    echo(render_summary(report))


def register(app: typer.Typer) -> None:
    app.command()(usage)
