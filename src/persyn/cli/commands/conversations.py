"""`persyn conversations`: the conversations an agent has had, and their dialog."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import block, dump_json, echo, message_line, one_line, trace_lines

__all__ = ["register"]


conversations_app = command_group("Conversations an agent has had, and their full dialog.")


@conversations_app.command("list")
def conversations_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    channel: Annotated[str | None, typer.Option("--channel", help="Only this channel.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")
    ] = 20,
    as_json: JsonOption = False,
) -> None:
    """List conversations, newest first."""
    from persyn.ops.history import list_conversations

    cli = CliContext.of(ctx)
    settings = cli.settings
    rows = run(list_conversations(settings, settings.agent(agent), channel, limit))
    if as_json:
        echo(dump_json([r.model_dump(mode="json") for r in rows]))
        return
    for row in rows:
        state = "open" if row.closed_at is None else "closed"
        echo(
            f"{row.id}  {row.started_at:%Y-%m-%d %H:%M}  {one_line(row.service)}/{one_line(row.channel)}  {state}"
        )


@conversations_app.command("show")
def conversations_show(
    ctx: typer.Context,
    conversation_id: Annotated[str, typer.Argument(metavar="ID", help="The conversation's ULID.")],
    agent: AgentOption = None,
    as_json: JsonOption = False,
    deliberation: Annotated[
        bool,
        typer.Option(
            "--deliberation",
            help="Also show, under each message, what deliberation did: the critics' objections "
            "(or why a critic was skipped) and the decision to speak, stay silent or decline.",
        ),
    ] = False,
) -> None:
    """Read a conversation's full dialog."""
    from persyn.ops.history import conversation_dialog

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    conversation, messages, traces = run(
        conversation_dialog(settings, chosen, conversation_id, deliberation=deliberation)
    )
    if as_json:
        payload: dict[str, Any] = {
            "conversation": conversation.model_dump(mode="json"),
            "messages": [m.model_dump(mode="json") for m in messages],
        }
        if deliberation:
            payload["deliberation"] = traces
        echo(dump_json(payload))
        return
    echo(
        f"Conversation {conversation.id} on {one_line(conversation.service)}/{one_line(conversation.channel)}"
    )
    for message in messages:
        echo(message_line(message))
        trace = traces.get(message.event_id or "") if message.role.value != "agent" else None
        if trace:
            for line in trace_lines(trace):
                echo(f"    · {block(line, '      ')}")


def register(app: typer.Typer) -> None:
    app.add_typer(conversations_app, name="conversations")
