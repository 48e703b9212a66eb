"""Talking to an agent and serving it: `persyn chat`, `send`, `run`, `worker`."""

from __future__ import annotations

import asyncio
import math
import signal
import sys
from typing import Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, run
from persyn.cli.render import echo
from persyn.core.errors import InputError

__all__ = ["register"]


def chat(
    ctx: typer.Context,
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
    from persyn.runtime.compose import build_runtime

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    cli.preflight()

    async def _chat() -> int:
        runtime = build_runtime(settings, clock=cli.clock)
        await runtime.start(workers=True, role="chat")
        try:
            return await run_chat(runtime, chosen, display_name=as_name)
        finally:
            await runtime.stop()

    raise typer.Exit(run(_chat()))


def send(
    ctx: typer.Context,
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
    from persyn.runtime.compose import build_runtime

    # Checked before anything is queued: a failure after it would make a retry a duplicate.
    if not (timeout > 0 and math.isfinite(timeout)):
        raise InputError(f"invalid --timeout {timeout!r}: give a positive number of seconds")
    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    raw: str | bytes = sys.stdin.buffer.read() if text == "-" else text
    cli.preflight()

    async def _send() -> int:
        runtime = build_runtime(settings, clock=cli.clock)
        body = runtime.validate_text(raw)
        await runtime.start(workers=False)
        try:
            now = runtime.clock.now()
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
                echo(event.id)
                return 0
            try:
                marker = await runtime.wait_marker(chosen.id, event.id, timeout=timeout)
            except TimeoutError:
                typer.secho(
                    f"error: no reply to {event.id} within {timeout:g}s; it stays queued and a worker "
                    "(`persyn run` or `persyn worker`) answers it: do not send it again",
                    err=True,
                    fg=typer.colors.RED,
                )
                return 1
            if marker.transmitted:
                echo(marker.text or "")
                return 0
            echo(f"· {chosen.name} stayed silent: {marker.reason}", err=True, dim=True)
            return 1
        finally:
            await runtime.stop()

    raise typer.Exit(run(_send()))


async def _serve(cli: CliContext, *, housekeeping: bool) -> int:
    from persyn.runtime.compose import build_runtime

    settings = cli.settings
    cli.preflight()
    runtime = build_runtime(settings, clock=cli.clock)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.start(workers=True, scheduler=housekeeping)
    names = ", ".join(a.name for a in settings.agents) or "no agents"
    echo(f"persyn is serving {names} (Ctrl-C or SIGTERM stops; unfinished work resumes on restart)")
    try:
        await stop.wait()
    finally:
        echo("stopping...")
        await runtime.stop()
    return 0


def run_command(ctx: typer.Context) -> None:
    """Run the deployment: workers, scheduler and configured channels in one process.

    SIGTERM stops it without losing accepted events; activations that were running resume
    after the last finished step when it starts again."""
    raise typer.Exit(run(_serve(CliContext.of(ctx), housekeeping=True)))


def worker_command(ctx: typer.Context) -> None:
    """Run workers only (scale-out): they take events for any agent from the shared queue."""
    raise typer.Exit(run(_serve(CliContext.of(ctx), housekeeping=False)))


def register(app: typer.Typer) -> None:
    app.command()(chat)
    app.command()(send)
    app.command("run")(run_command)
    app.command("worker")(worker_command)
