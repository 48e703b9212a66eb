"""`persyn channels`: the channels the agent has spoken on."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

__all__ = ["register"]


channels_app = command_group("The channels the agent has spoken on, each with its recent conversations.")


@channels_app.command("list")
def channels_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """Channels the agent has conversed on, most recently active first."""
    from persyn.ops.history import channels

    cli = CliContext.of(ctx)
    settings = cli.settings
    found = run(channels(settings, settings.agent(agent)))
    if as_json:
        echo(dump_json([f"{c.service}:{c.channel}" for c in found]))
        return
    if not found:
        echo("No conversations yet.")
    for digest in found:
        echo(f"{one_line(digest.service)}:{one_line(digest.channel)}")


@channels_app.command("show")
def channels_show(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="CHANNEL", help="SERVICE:CHANNEL, as `channels list` prints it.")
    ],
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """A channel's latest conversations with their summaries, newest first (bounded); read one
    in full with `persyn conversations show ID`. For a chat network, also which process connects
    it and how its connections stood at that process's last lease renewal."""
    from persyn.ops.doctor.channels import network_connection
    from persyn.ops.history import channel

    cli = CliContext.of(ctx)
    settings = cli.settings
    digest = run(channel(settings, settings.agent(agent), name))
    if as_json:
        payload = [
            {"conversation": c.model_dump(mode="json"), "summary": summary}
            for c, summary in digest.conversations
        ]
        echo(dump_json(payload))
        return
    echo(f"{one_line(digest.service)}:{one_line(digest.channel)}")
    connection = run(network_connection(settings, digest.service, cli.clock.now()))
    if connection is not None:  # a chat network: who connects it and how that stands
        echo(f"  connection: {one_line(connection.partition(': ')[2])}")
    for conversation, summary in digest.conversations:
        echo(
            f"  {conversation.id}  {conversation.started_at:%Y-%m-%d %H:%M}: "
            f"{one_line(summary or '(not consolidated yet)')}"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(channels_app, name="channels")
