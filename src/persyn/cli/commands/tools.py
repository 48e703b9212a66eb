"""`persyn tools`: what the agent is offered, and one tool run as the agent would run it."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, fail, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

__all__ = ["register"]

tools_app = command_group(
    "The agent's tools: the built-in ones, those of the configured MCP servers (offered as SERVER__TOOL) "
    "and those its models' providers run ([models] provider_tools)."
)


@tools_app.command("list")
def tools_list(ctx: typer.Context, agent: AgentOption = None, as_json: JsonOption = False) -> None:
    """Every tool the agent is offered, by source, and each MCP server's state."""
    from persyn.ops.tools import list_tools

    cli = CliContext.of(ctx)
    settings = cli.settings
    report = run(list_tools(settings, settings.agent(agent), cli.clock))
    if as_json:
        echo(dump_json(report.model_dump(mode="json")))
        return
    for source in ("built-in", *(s.name for s in report.mcp_servers)):
        tools = [t for t in report.tools if t.source != "provider" and (t.server or "built-in") == source]
        status = next((s for s in report.mcp_servers if s.name == source), None)
        if status is None:
            echo(f"built-in ({len(tools)})")
        elif status.error is not None:
            echo(f"mcp server {source}: unavailable, no tools ({status.error})")
            continue
        else:
            echo(f"mcp server {source} ({status.transport}, {len(tools)})")
        for tool in tools:
            mark = " (via call_tool)" if tool.deferred else ""
            echo(one_line(f"  {tool.name}{mark}  {tool.description}")[:160])
    provided = [t for t in report.tools if t.source == "provider"]
    if provided:
        echo(f"provider ({len(provided)}, run by the model inside its reply)")
        for tool in provided:
            echo(one_line(f"  {tool.name}  [{', '.join(tool.models)}]  {tool.description}")[:160])


@tools_app.command("call")
def tools_call(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The tool's name, as `persyn tools list` shows it.")
    ],
    args: Annotated[
        str, typer.Option("--args", help='The arguments as a JSON object, e.g. \'{"message": "hi"}\'.')
    ] = "{}",
    channel: Annotated[
        str,
        typer.Option(
            "--channel",
            help="Run it as on SERVICE:CHANNEL with nobody else present (what the agent may show there).",
        ),
    ] = "cli:operator",
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run one tool exactly as the agent would (arguments checked, time and size limits); print its result.

    The agent's own goals and reminders are not the operator's to author: create_goal, set_reminder,
    edit_reminder, and update_goal other than closing a goal are refused. Exits 2 for an unknown tool,
    invalid arguments or a refused call, 1 when the tool fails."""
    from persyn.ops.tools import call_tool

    try:
        arguments: Any = json.loads(args)
    except json.JSONDecodeError as exc:
        raise fail(f"--args is not JSON: {exc.msg} at character {exc.pos} of {args!r}") from None
    if not isinstance(arguments, dict):
        raise fail(f"--args must be a JSON object, not {args!r}")
    cli = CliContext.of(ctx)
    settings = cli.settings
    outcome = run(call_tool(settings, settings.agent(agent), cli.clock, name, arguments, channel))
    if as_json:
        echo(dump_json(outcome.model_dump(mode="json", exclude={"trip"})))
    elif outcome.ok:
        output = outcome.output or {}
        echo(
            output["result"]
            if set(output) == {"result"}
            else json.dumps(output, ensure_ascii=False, indent=2)
        )
    if outcome.ok:
        return
    if outcome.status.value in ("unknown_tool", "invalid_arguments"):
        raise fail(outcome.content, 2)
    raise fail(outcome.content, 1)


def register(app: typer.Typer) -> None:
    app.add_typer(tools_app, name="tools")
