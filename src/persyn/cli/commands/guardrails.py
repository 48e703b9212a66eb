"""`persyn guardrails`: the patterns in force, what they recorded, and lifting a block
(SPEC §4.10; `persyn doctor` also shows the active blocks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from persyn.cli.context import CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

if TYPE_CHECKING:
    from persyn.store.ports.guardrails import GuardrailEvent

__all__ = ["register"]

guardrails_app = command_group(
    "Guardrails: patterns over recent interaction history (conflict, prohibited requests, the "
    "agent's own anomalies) that notify the operator, block replies or end a conversation."
)


def _subject(event: GuardrailEvent) -> str:
    if event.subject_kind == "person":
        return f"person {event.subject} on {event.service}:{event.channel}"
    return "the agent" if event.subject_kind == "agent" else f"channel {event.subject}"


@guardrails_app.command("list")
def guardrails_list(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Only this agent's blocks (name or id); default: every agent's."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The patterns in force ([safety], [[guardrails]]: the same for every agent) and the
    blocks active now."""
    from persyn.ops.guardrails import active_blocks, guardrail_patterns

    cli = CliContext.of(ctx)
    chosen = None if agent is None else cli.settings.agent(agent).id
    patterns = guardrail_patterns(cli.settings)
    blocks = run(active_blocks(cli.settings, cli.now()))
    blocks = [block for block in blocks if chosen is None or block.agent_id == chosen]
    if as_json:
        echo(
            dump_json(
                {
                    "patterns": [p.model_dump(mode="json") for p in patterns],
                    "blocks": [b.model_dump(mode="json") for b in blocks],
                }
            )
        )
        return
    if not patterns:
        echo("No guardrails are in force ([safety] enabled = false, or no patterns).")
    for pattern in patterns:
        unit = "score" if pattern.detector == "classifier" else "count"
        echo(
            f"{pattern.name}  {pattern.detector}, {pattern.window_minutes:g} min window, "
            f"{unit} ≥ {pattern.threshold:g} → {', '.join(pattern.actions)}"
        )
    echo(f"\n{len(blocks)} active block(s)" + (":" if blocks else "."))
    for block in blocks:
        echo(
            f"{block.id}  {block.guardrail}: {_subject(block)} until {block.blocked_until:%Y-%m-%d %H:%M} UTC"
        )


@guardrails_app.command("events")
def guardrails_events(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option("--since", help="ISO time or a span like 30m, 12h, 7d; default: every event."),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Only this agent's (name or id); default: every agent's."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many, newest first.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Every recorded trigger, newest first: the pattern, whom or what, why, and what was done."""
    from persyn.ops.guardrails import guardrail_events

    cli = CliContext.of(ctx)
    chosen = None if agent is None else cli.settings.agent(agent).id
    start = None if since is None else cli.since(since)
    events = run(guardrail_events(cli.settings, chosen, start, limit))
    if as_json:
        echo(dump_json([e.model_dump(mode="json") for e in events]))
        return
    if not events:
        echo("No guardrail has triggered.")
    now = cli.now()
    for event in events:
        state = ""
        if event.blocked_until is not None:
            state = " (block active)" if event.blocks_at(now) else " (block over)"
        echo(
            f"{event.detected_at:%Y-%m-%d %H:%M}  {event.id}  {event.guardrail}: {_subject(event)}; "
            f"{', '.join(event.actions)}{state}\n    {one_line(event.reason)}"
        )


@guardrails_app.command("lift")
def guardrails_lift(
    ctx: typer.Context,
    event_id: Annotated[str, typer.Argument(metavar="EVENT_ID", help="The event whose block ends now.")],
) -> None:
    """End a block now (the event stays recorded). Deployment-wide: EVENT_ID names the block of
    whichever agent it is."""
    from persyn.ops.guardrails import lift_block

    cli = CliContext.of(ctx)
    lifted = run(lift_block(cli.settings, event_id, cli.now()))
    echo(f"lifted the block of {lifted.id} ({lifted.guardrail}: {_subject(lifted)})")


def register(app: typer.Typer) -> None:
    app.add_typer(guardrails_app, name="guardrails")
