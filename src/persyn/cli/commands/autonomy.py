"""What the agent does on its own: `persyn heartbeat`, `reminders`, `goals`, `activity`."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import block, dump_json, echo, one_line

__all__ = ["register"]


heartbeat_app = command_group(
    "The agent's heartbeat: its idle cognition between conversations. Delete it and the agent "
    "sleeps until spoken to; restore wakes it."
)


reminders_app = command_group(
    "Reminders the agent set itself: list, show what happened when they fired, cancel."
)


goals_app = command_group("Goals the agent set itself (read-only here).")


@heartbeat_app.command("status")
def heartbeat_status_command(
    ctx: typer.Context,
    agent: AgentOption = None,
    limit: Annotated[int, typer.Option("--limit", help="How many recent self-initiated runs to list.")] = 10,
    as_json: JsonOption = False,
) -> None:
    """Whether the heartbeat beats and when next, today's autonomy budget, and what the agent
    recently did on its own (beats, reminders, skips, rests)."""
    from persyn.ops.autonomy import heartbeat

    cli = CliContext.of(ctx)
    settings = cli.settings
    view = run(heartbeat(settings, settings.agent(agent), cli.now(), limit))
    if as_json:
        payload = {
            "heartbeat": None if view.beat is None else view.beat.model_dump(mode="json"),
            "tokens_today": view.tokens_today,
            "daily_token_budget": view.budget,
            "activity": [e.model_dump(mode="json") for e in view.activity],
        }
        echo(dump_json(payload))
        return
    if view.beat is None:
        echo("asleep: the heartbeat is deleted (restore it with `persyn heartbeat restore`)")
    else:
        echo(
            f"beating: next at {view.beat.next_fire_at:%Y-%m-%d %H:%M} UTC, {view.beat.fire_count} beat(s) so far"
        )
    echo(f"autonomy budget: {view.tokens_today} of {view.budget} tokens used in the last 24 hours")
    for entry in view.activity:
        echo(
            f"  {entry.at:%Y-%m-%d %H:%M} {entry.kind:<9} {one_line(entry.outcome[:100])}  ({entry.tokens} tokens)"
        )


@heartbeat_app.command("delete")
def heartbeat_delete(ctx: typer.Context, agent: AgentOption = None) -> None:
    """Put the agent to sleep: no beats (durably, across restarts) until `restore`. It still
    answers messages, and its own reminders still fire."""
    from persyn.ops.autonomy import sleep

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    if run(sleep(settings, chosen)):
        echo(f"{chosen.name}'s heartbeat is deleted: it sleeps until spoken to.")
    else:
        echo(f"{chosen.name} was already asleep.")


@heartbeat_app.command("restore")
def heartbeat_restore(ctx: typer.Context, agent: AgentOption = None) -> None:
    """Wake the agent's idle cognition: the heartbeat beats again, first one interval from now."""
    from persyn.ops.autonomy import wake

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    beat = run(wake(settings, chosen, cli.now()))
    echo(f"{chosen.name}'s heartbeat beats again; next at {beat.next_fire_at:%Y-%m-%d %H:%M} UTC.")


@reminders_app.command("list")
def reminders_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    cancelled: Annotated[bool, typer.Option("--cancelled", help="Include cancelled reminders.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The reminders the agent set itself, soonest first (the heartbeat is not one of them)."""
    from persyn.ops.autonomy import agent_reminders
    from persyn.schedule import describe_trigger

    cli = CliContext.of(ctx)
    settings = cli.settings
    found = run(agent_reminders(settings, settings.agent(agent), cancelled))
    if as_json:
        echo(dump_json([r.model_dump(mode="json") for r in found]))
        return
    if not found:
        echo("No reminders: the agent sets them itself, with its reminder tools.")
    for reminder in found:
        echo(
            f"{reminder.id}  next {reminder.next_fire_at:%Y-%m-%d %H:%M}  {describe_trigger(reminder.trigger)}"
            f"  [{reminder.status}]  {one_line(reminder.objective[:80])}"
        )


@reminders_app.command("show")
def reminders_show(
    ctx: typer.Context,
    reminder_id: Annotated[
        str, typer.Argument(metavar="ID", help="The reminder's ULID (see `reminders list`).")
    ],
    agent: AgentOption = None,
) -> None:
    """A reminder and what happened the last times it fired."""
    from persyn.ops.autonomy import reminder
    from persyn.schedule import describe_trigger

    cli = CliContext.of(ctx)
    settings = cli.settings
    found, runs = run(reminder(settings, settings.agent(agent), reminder_id))
    echo(
        f"{block(found.objective, '  ')}\n  {describe_trigger(found.trigger)}; "
        f"next {found.next_fire_at:%Y-%m-%d %H:%M} UTC"
    )
    echo(f"  status {found.status}, fired {found.fire_count} time(s)")
    for fired in runs:
        echo(f"  {fired.at:%Y-%m-%d %H:%M} {one_line(fired.outcome[:100])} ({fired.tokens} tokens)")


@reminders_app.command("cancel")
def reminders_cancel(
    ctx: typer.Context,
    reminder_id: Annotated[str, typer.Argument(metavar="ID", help="The reminder's ULID.")],
    agent: AgentOption = None,
) -> None:
    """Cancel one of the agent's reminders: it never fires again (it stays listed with
    `--cancelled`)."""
    from persyn.ops.autonomy import cancel_reminder

    cli = CliContext.of(ctx)
    settings = cli.settings
    cancelled = run(cancel_reminder(settings, settings.agent(agent), reminder_id, cli.now()))
    echo(f"cancelled: {one_line(cancelled.objective[:80])}")


def activity_command(
    ctx: typer.Context,
    agent: AgentOption = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only since then: 7d, 12h, 30m, or an ISO time.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """What the agent did on its own — heartbeat beats, reminder runs, skips and rests — with
    each run's token cost, newest first."""
    from persyn.ops.autonomy import activity

    cli = CliContext.of(ctx)
    settings = cli.settings
    entries = run(activity(settings, settings.agent(agent), cli.since(since), limit))
    if as_json:
        echo(dump_json([e.model_dump(mode="json") for e in entries]))
        return
    if not entries:
        echo("Nothing self-initiated yet.")
    for entry in entries:
        echo(
            f"{entry.at:%Y-%m-%d %H:%M} {entry.kind:<9} {entry.tokens:>7} tokens  {one_line(entry.outcome[:100])}"
        )
    echo(f"total: {sum(e.tokens for e in entries)} tokens over {len(entries)} run(s)")


@goals_app.command("list")
def goals_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """The goals the agent set itself: open ones first, then how the others ended."""
    from persyn.ops.autonomy import agent_goals

    cli = CliContext.of(ctx)
    settings = cli.settings
    found = run(agent_goals(settings, settings.agent(agent)))
    if as_json:
        echo(dump_json([g.model_dump(mode="json") for g in found]))
        return
    if not found:
        echo("No goals: the agent creates them itself, with its goal tool.")
    for goal in found:
        ending = f" — {goal.outcome}" if goal.outcome else ""
        echo(f"{goal.id}  [{goal.status}]  {one_line(goal.description[:100] + ending)}")


def register(app: typer.Typer) -> None:
    app.add_typer(heartbeat_app, name="heartbeat")
    app.add_typer(reminders_app, name="reminders")
    app.add_typer(goals_app, name="goals")
    app.command("activity")(activity_command)
