"""Talking to an agent and serving it: `persyn chat`, `send`, `run`, `worker`."""

from __future__ import annotations

import asyncio
import importlib
import math
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, run
from persyn.core.errors import InputError
from persyn.present.render import echo

if TYPE_CHECKING:
    from persyn.core.clock import Clock
    from persyn.core.config import Settings
    from persyn.core.events import Speaker
    from persyn.runtime.app import Runtime
    from persyn.runtime.durable import control_client
    from persyn.store import Store

__all__ = ["CHAT_EXIT_GRACE_SECONDS", "NO_WORKER_EXIT", "chat_runtime", "register"]

# What background work of the chat may still finish at exit (a turn's tail, an instant
# model's deliberation); the rest resumes in the next process (`runtime/durable/_shutdown.py`).
CHAT_EXIT_GRACE_SECONDS = 0.5
NO_WORKER_EXIT = 3  # `persyn send`: queued, but no worker is running to answer it


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
    from persyn.channels.terminal.channel import run_chat
    from persyn.runtime.turn.speakers import resolve_speaker

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    cli.preflight()
    clock = cli.clock

    async def _chat() -> int:
        async with chat_runtime(settings, clock) as (store, starting):

            async def operator(agent_id: str, speaker: Speaker) -> tuple[str, str | None]:
                return await resolve_speaker(store, agent_id, speaker, clock.now())

            return await run_chat(starting, chosen, resolve_speaker=operator, display_name=as_name)

    raise typer.Exit(run(_chat()))


@asynccontextmanager
async def chat_runtime(
    settings: Settings, clock: Clock
) -> AsyncIterator[tuple[Store, asyncio.Future[Runtime]]]:
    """The start-up `persyn chat` and `persyn console` share: the store is opened first (it
    alone answers who the operator is, so the prompt is up at once) and the runtime (DBOS,
    the models: seconds of imports) starts behind it, as the future given with the store.

    On leaving, a started runtime stops with `CHAT_EXIT_GRACE_SECONDS`; one that failed to
    start only closes the store (the surface has shown its error already)."""
    from persyn.store import open_store

    store = open_store(settings.database_url)
    await store.setup()
    starting = asyncio.ensure_future(_start_chat_runtime(settings, clock, store))
    try:
        yield store, starting
    finally:
        try:
            runtime = await starting
        except BaseException:  # it did not start: the surface showed why
            await store.close()
        else:
            await runtime.stop(grace=CHAT_EXIT_GRACE_SECONDS)


async def _start_chat_runtime(settings: Settings, clock: Clock, store: Store) -> Runtime:
    """Build and start the chat's (or the console's) runtime; its imports run off the loop, so the prompt and
    the first line the operator types are not held up by them."""
    await asyncio.to_thread(importlib.import_module, "persyn.runtime.compose")
    from persyn.runtime.compose import build_runtime

    runtime = build_runtime(settings, clock=clock, store=store)
    await runtime.start(workers=True, role="chat")
    return runtime


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
    from persyn.core.ids import new_id
    from persyn.core.messages import validate_message_text
    from persyn.runtime.durable import control_client as control

    # Checked before anything is queued: a failure after it would make a retry a duplicate.
    if not (timeout > 0 and math.isfinite(timeout)):
        raise InputError(f"invalid --timeout {timeout!r}: give a positive number of seconds")
    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    raw: str | bytes = sys.stdin.buffer.read() if text == "-" else text
    body = validate_message_text(raw, settings.conversation.max_message_chars)
    now = cli.clock.now()
    request = control.SendRequest(
        event_id=new_id(now),
        agent_id=chosen.id,
        channel=channel,
        speaker_id=as_name.lower(),
        display_name=as_name,
        text=body,
        received_at=now.isoformat(),
    )
    # A running worker takes it over its control socket (`runtime.durable.control`): no DBOS client,
    # no queue polling. Without one, the queue path, with the same event (idempotent).
    started = time.monotonic()
    outcome = control.send(settings.data_dir, request, wait=wait, timeout=timeout)
    if isinstance(outcome, control.Unreachable | control.Lost):
        left = max(timeout - (time.monotonic() - started), 0.001)
        queued = _send_through_queue(cli, request, wait=wait, timeout=timeout, left=left, name=chosen.name)
        raise typer.Exit(run(queued))
    if isinstance(outcome, control.Accepted):
        echo(outcome.event_id)
        raise typer.Exit(0)
    if isinstance(outcome, control.TimedOut):
        raise typer.Exit(_timed_out(request.event_id, timeout))
    raise typer.Exit(_outcome(chosen.name, outcome.transmitted, outcome.text, outcome.reason))


async def _send_through_queue(
    cli: CliContext,
    request: control_client.SendRequest,
    *,
    wait: bool,
    timeout: float,
    left: float,
    name: str,
) -> int:
    """`persyn send` with no worker on the control socket: store and enqueue through a DBOS
    client (`dispatch.Submitter`), then wait for the marker in the store."""
    from persyn.core.events import Event, Speaker
    from persyn.runtime.durable.dispatch import NoWorkerRunning, Submitter, worker_liveness

    cli.preflight()
    settings = cli.settings
    # Only what submitting needs: no model gateway, cognition or embedder is imported.
    submitter = Submitter(settings, cli.clock)
    body = submitter.intake.validate_text(request.text)
    async with submitter:
        speaker = Speaker(
            service="cli",
            channel=request.channel,
            speaker_id=request.speaker_id,
            display_name=request.display_name,
        )
        event = Event(
            id=request.event_id,
            agent_id=request.agent_id,
            service="cli",
            channel=request.channel,
            speaker=speaker,
            text=body,
            received_at=datetime.fromisoformat(request.received_at),
        )
        await submitter.intake.submit(event)  # a second submit of the same event changes nothing
        alive = worker_liveness(settings)
        if not wait:
            echo(event.id)
            if alive is not None and not await asyncio.to_thread(alive):
                echo(f"· {_no_worker(event.id)}", err=True, dim=True)
            return 0
        try:
            marker = await submitter.markers.wait(
                request.agent_id, event.id, timeout=left, workers_alive=alive
            )
        except NoWorkerRunning:
            typer.secho(f"error: {_no_worker(event.id)}", err=True, fg=typer.colors.RED)
            return NO_WORKER_EXIT
        except TimeoutError:
            return _timed_out(event.id, timeout)
        return _outcome(name, marker.transmitted, marker.text, marker.reason)


def _timed_out(event_id: str, timeout: float) -> int:
    typer.secho(
        f"error: no reply to {event_id} within {timeout:g}s; it stays queued and a worker "
        "(`persyn run` or `persyn worker`) answers it: do not send it again",
        err=True,
        fg=typer.colors.RED,
    )
    return 1


def _outcome(name: str, transmitted: bool, text: str | None, reason: str | None) -> int:
    if transmitted:
        echo(text or "")
        return 0
    echo(f"· {name} stayed silent: {reason}", err=True, dim=True)
    return 1


def _no_worker(event_id: str) -> str:
    return (
        f"no worker is running, so nothing answers {event_id} yet; it stays queued and is answered "
        "when a worker starts: start one with `persyn run` (or `persyn worker`), and do not send it again"
    )


async def _serve(cli: CliContext, *, housekeeping: bool, workers: bool = True) -> int:
    from persyn.channels.network import configured_channels
    from persyn.cli.commands.web import serve_web, web_surface
    from persyn.runtime.compose import build_runtime
    from persyn.runtime.delivery.channel_leases import ChannelOwnership
    from persyn.runtime.durable.control import ControlServer
    from persyn.store.capabilities import capability
    from persyn.store.ports.leases import LeasesPort

    settings = cli.settings
    cli.preflight()
    web = await web_surface(settings) if housekeeping else None  # `persyn run` serves it
    runtime = build_runtime(settings, clock=cli.clock, meter_adapters=[web.usage] if web else ())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.start(workers=workers, scheduler=housekeeping)
    control = await ControlServer.start(runtime, settings)  # `persyn send`'s fast path
    # The chat networks connect in a process that runs the scheduler (`persyn run`), and in
    # one of those only: the one holding each network's lease (`runtime/delivery/channel_leases.py`).
    # A scale-out worker, or a second `persyn run`, would join the rooms a second time.
    networks = ChannelOwnership(
        capability(runtime.store, LeasesPort),
        runtime.clock,
        configured_channels(settings, runtime) if housekeeping else [],
        ttl_seconds=settings.dispatch.channel_lease_seconds,
        report=echo,
    )
    try:
        if web is not None:  # a port already taken stops the start, and the runtime with it
            await serve_web(web, runtime)
        await networks.start()
        names = ", ".join(a.name for a in settings.agents) or "no agents"
        echo(f"persyn is serving {names} (Ctrl-C or SIGTERM stops; unfinished work resumes on restart)")
        await stop.wait()
    finally:
        echo("stopping...")
        await control.close()
        if web is not None:
            await web.stop()
        await networks.stop()
        await runtime.stop()
    return 0


def run_command(
    ctx: typer.Context,
    workers: Annotated[
        bool,
        typer.Option(
            "--workers/--no-workers",
            help="--no-workers serves the channels (web, chat networks) only: the turns, the scheduler "
            "and the reminders are left to `persyn worker` processes and a `persyn run` elsewhere "
            "sharing the store (PostgreSQL for processes on several hosts).",
        ),
    ] = True,
) -> None:
    """Run the deployment: workers, scheduler and configured channels in one process
    (deployment-wide: every agent).

    Each chat network is connected by one `persyn run` of the deployment: another one
    sharing the store serves workers only for it, says so, and takes it over within
    [dispatch] channel_lease_seconds (and a third) if the first dies (`persyn doctor`
    shows which process holds each).

    SIGTERM stops it without losing accepted events; activations that were running resume
    after the last finished step when it starts again."""
    raise typer.Exit(run(_serve(CliContext.of(ctx), housekeeping=True, workers=workers)))


def worker_command(ctx: typer.Context) -> None:
    """Run workers only (scale-out): they take events for any agent from the shared queue
    (deployment-wide)."""
    raise typer.Exit(run(_serve(CliContext.of(ctx), housekeeping=False)))


def register(app: typer.Typer) -> None:
    app.command()(chat)
    app.command()(send)
    app.command("run")(run_command)
    app.command("worker")(worker_command)
