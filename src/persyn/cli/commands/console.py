"""`persyn console`: the full-screen operator console (SPEC App. B; `persyn chat` stays the
line-mode chat for pipes and scripts)."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, run
from persyn.core.errors import InputError

__all__ = ["register"]


def console(
    ctx: typer.Context,
    agent: AgentOption = None,
    as_name: Annotated[
        str | None,
        typer.Option("--as", help="Your display name for this session (overrides the remembered one)."),
    ] = None,
) -> None:
    """Open the operator console: the chat with live cognition, and the directory, channels,
    mind and usage panels (F1-F5). Needs a terminal; `persyn chat` is the line-mode chat.

    Messages the agent sent while the console was closed (reminders, outreach) are shown
    first, marked as missed; those a `persyn run` daemon sends while it is open arrive live."""
    import sys

    from persyn.cli.commands.serve import chat_runtime

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InputError("persyn console needs a terminal; for pipes and scripts use `persyn chat`")
    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    cli.preflight()
    clock = cli.clock

    async def _console() -> int:
        from persyn.channels.terminal.channel import login_name
        from persyn.console import ConsoleApp, Operator, Spend

        operator = Operator(settings, chosen, clock.now)

        async def spend() -> Spend:
            report = await operator.usage("stage", operator.today())
            total = report.total
            return Spend(total.input_tokens + total.output_tokens, total.cost_usd)

        model = settings.models.respond or settings.models.default
        # The screen is up at once; the runtime (DBOS, the models) starts behind it.
        async with chat_runtime(settings, clock) as (_, starting):
            app = ConsoleApp(
                starting,
                chosen,
                login=login_name(),
                model_label=model if isinstance(model, str) else " → ".join(model),
                operator=operator,
                spend=spend,
                display_name=as_name,
            )
            code = await app.run_async()
        return code or 0

    raise typer.Exit(run(_console()))


def register(app: typer.Typer) -> None:
    app.command()(console)
