"""The `persyn` command. One `asyncio.run` per command, at this edge."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from persyn.core.config import CONFIG_FILE, Settings, home_from_env, load_settings
from persyn.core.errors import PersynError

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="persyn",
    help=(
        "Persyn runs autonomous agents with a persistent autobiographical memory.\n\n"
        "Start with `persyn init --name NAME`, then `persyn chat`. Data and configuration "
        "live under PERSYN_HOME (default ~/.persyn); every setting in persyn.toml can be "
        "overridden by a PERSYN_SECTION__KEY environment variable."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
agents_app = typer.Typer(help="The agents of this deployment.", no_args_is_help=True)
app.add_typer(agents_app, name="agents")
conversations_app = typer.Typer(
    help="Conversations an agent has had, and their full dialog.", no_args_is_help=True
)
app.add_typer(conversations_app, name="conversations")

_state: dict[str, Path | None] = {"home": None}

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


@app.callback()
def _root(home: HomeOption = None) -> None:
    _state["home"] = home


def _settings() -> Settings:
    settings = load_settings(_state["home"])
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    return settings


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


# init / agents ---------------------------------------------------------------------------
@app.command()
def init(
    name: Annotated[str | None, typer.Option("--name", "-n", help="The new agent's name.")] = None,
    home: HomeOption = None,
) -> None:
    """Create a deployment with one agent, or add another agent to an existing one.

    Agents in one deployment share infrastructure (database, model servers) but never
    memories: every stored row is namespaced by agent id."""
    from persyn.runtime.setup import init_home

    root = home_from_env(home or _state["home"])
    result = init_home(root, name)
    if result.created_file:
        typer.echo(f"Created {result.path}")
    else:
        typer.echo(f"Added an agent to {result.path}")
    typer.echo(f"Agent {result.agent.name} ({result.agent.id}) is ready. Talk to it with:")
    home_flag = "" if home is None and _state["home"] is None else f" --home {root}"
    typer.echo(f"  persyn{home_flag} chat --agent {result.agent.name}")


@agents_app.command("list")
def agents_list(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the agents configured in persyn.toml."""
    settings = _settings()
    rows = [{"name": a.name, "id": a.id, "disposition": a.disposition} for a in settings.agents]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"No agents yet in {settings.home / CONFIG_FILE}. Create one: persyn init --name NAME")
        return
    for row in rows:
        typer.echo(f"{row['name']:<20} {row['id']}")


# chat / send -----------------------------------------------------------------------------
@app.command()
def chat(
    agent: AgentOption = None,
    as_name: Annotated[
        str | None,
        typer.Option("--as", help="Your display name for this session (overrides the remembered one)."),
    ] = None,
) -> None:
    """Chat with an agent in this terminal. Type /help for commands; Ctrl-D leaves.

    Without an API key the agent runs on a tiny offline model (Gemma 3 270M via llama.cpp);
    set ANTHROPIC_API_KEY / OPENAI_API_KEY or [models] in persyn.toml for a real one."""
    from persyn.channels.terminal import run_chat
    from persyn.runtime.app import Runtime

    settings = _settings()
    chosen = settings.agent(agent)

    async def _chat() -> int:
        runtime = Runtime(settings)
        await runtime.start(workers=True)
        try:
            return await run_chat(runtime, chosen, display_name=as_name)
        finally:
            await runtime.stop()

    raise typer.Exit(_run(_chat()))


@app.command()
def send(
    text: Annotated[str, typer.Argument(help="The message. Use - to read it from standard input.")],
    agent: AgentOption = None,
    as_name: Annotated[str, typer.Option("--as", help="Display name of the sender.")] = "operator",
    channel: Annotated[str, typer.Option("--channel", help="Channel name the message arrives on.")] = "cli",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the reply and print it.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the reply.")] = 300.0,
) -> None:
    """Send one message to an agent served by `persyn run` / `persyn worker`.

    The event is stored and queued; any worker of this deployment answers it. With --wait
    (the default) the reply, or the agent's stated reason for silence, is printed."""
    from persyn.core.events import Event, Speaker
    from persyn.core.ids import new_id
    from persyn.runtime.app import Runtime

    settings = _settings()
    chosen = settings.agent(agent)
    raw: str | bytes = sys.stdin.buffer.read() if text == "-" else text

    async def _send() -> int:
        runtime = Runtime(settings)
        body = runtime.validate_text(raw)
        await runtime.start(workers=False)
        try:
            now = datetime.now(UTC)
            event = Event(
                id=new_id(now),
                agent_id=chosen.id,
                service="cli",
                channel=channel,
                speaker=Speaker(
                    service="cli", channel=channel, speaker_id=as_name.lower(), display_name=as_name
                ),
                text=body,
                received_at=now,
            )
            await runtime.submit(event)
            if not wait:
                typer.echo(event.id)
                return 0
            marker = await runtime.wait_marker(chosen.id, event.id, timeout=timeout)
            if marker.transmitted:
                typer.echo(marker.text or "")
                return 0
            typer.secho(f"· {chosen.name} stayed silent: {marker.reason}", err=True, dim=True)
            return 1
        finally:
            await runtime.stop()

    raise typer.Exit(_run(_send()))


# daemon ------------------------------------------------------------------------------------
async def _serve(settings: Settings, *, housekeeping: bool) -> int:
    from persyn.runtime.app import Runtime

    runtime = Runtime(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.start(workers=True)
    names = ", ".join(a.name for a in settings.agents) or "no agents"
    typer.echo(f"persyn is serving {names} (Ctrl-C or SIGTERM stops; unfinished work resumes on restart)")
    try:
        await stop.wait()
    finally:
        typer.echo("stopping...")
        await runtime.stop()
    return 0


@app.command()
def run() -> None:
    """Run the deployment: workers, scheduler and configured channels in one process.

    SIGTERM stops it without losing accepted events; activations that were running resume
    after the last finished step when it starts again."""
    settings = _settings()
    raise typer.Exit(_run(_serve(settings, housekeeping=True)))


@app.command()
def worker() -> None:
    """Run workers only (scale-out): they take events for any agent from the shared queue."""
    settings = _settings()
    raise typer.Exit(_run(_serve(settings, housekeeping=False)))


# usage -------------------------------------------------------------------------------------
def _parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    if value[:-1].isdigit() and value[-1] in units:
        return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise PersynError(
            f"invalid --since {value!r}: use ISO 8601 (2026-11-30T09:00) or 30m, 12h, 7d, 2w"
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@app.command()
def usage(
    by: Annotated[
        str, typer.Option("--by", help="Group by: stage, model, channel, conversation or agent.")
    ] = "stage",
    since: Annotated[
        str | None, typer.Option("--since", help="ISO time or a span like 30m, 12h, 7d.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Sum the usage ledger exactly once (records are deduplicated by id).

    Cost comes from the [prices] table at the time of each call; unpriced calls are counted
    but not costed."""
    from persyn.usage.ledger import render_summary, summarize

    settings = _settings()
    report = summarize(settings.usage_log_path, by=by, since=_parse_since(since))
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        typer.echo(render_summary(report))


# conversations -----------------------------------------------------------------------------
@conversations_app.command("list")
def conversations_list(
    agent: AgentOption = None,
    channel: Annotated[str | None, typer.Option("--channel", help="Only this channel.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List conversations, newest first."""
    from persyn.runtime.inspect import list_conversations

    settings = _settings()
    rows = _run(list_conversations(settings, settings.agent(agent), channel, limit))
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    for row in rows:
        state = "open" if row.closed_at is None else "closed"
        typer.echo(f"{row.id}  {row.started_at:%Y-%m-%d %H:%M}  {row.service}/{row.channel}  {state}")


@conversations_app.command("show")
def conversations_show(
    conversation_id: Annotated[str, typer.Argument(metavar="ID", help="The conversation's ULID.")],
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Read a conversation's full dialog."""
    from persyn.runtime.inspect import conversation_dialog

    settings = _settings()
    conversation, messages = _run(conversation_dialog(settings, settings.agent(agent), conversation_id))
    if as_json:
        payload = {
            "conversation": conversation.model_dump(mode="json"),
            "messages": [m.model_dump(mode="json") for m in messages],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    typer.echo(f"Conversation {conversation.id} on {conversation.service}/{conversation.channel}")
    for message in messages:
        typer.echo(f"[{message.created_at:%Y-%m-%d %H:%M:%S}] {message.speaker_name}: {message.text}")


# doctor ------------------------------------------------------------------------------------
@app.command()
def doctor() -> None:
    """Check configuration, database and model reachability, and say what to fix."""
    from persyn.runtime.doctor import run_doctor

    raise typer.Exit(_run(run_doctor(_state["home"])))


def main() -> None:
    try:
        app()
    except PersynError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
