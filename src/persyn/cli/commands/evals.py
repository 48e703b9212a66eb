"""`persyn eval continuity`: a simulated week, the eleven criteria of SPEC §9, evidence quoted."""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from persyn.cli.context import JsonOption
from persyn.cli.help import command_group
from persyn.present.render import echo

if TYPE_CHECKING:
    from rich.console import Console

    from persyn.evals.scenario import Scenario

__all__ = ["register"]

eval_app = command_group(
    "Evaluations of this deployment's agent against what Persyn is for (SPEC §9): "
    "`persyn eval continuity` is the one to run first."
)


def _usage_error(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(2)


@eval_app.command()
def continuity(
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="mechanics: the scripted model double (free, a few minutes, what CI runs); "
            "behaviour: the configured respond model (or --model) with an LLM judge.",
        ),
    ] = "mechanics",
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            "-a",
            help="Evaluate a copy of this deployment's agent (its configuration and its store copied "
            "into the scratch home; the live one is only read). Default: a fresh agent.",
            show_default=False,
        ),
    ] = None,
    days: Annotated[
        int | None,
        typer.Option(
            "--days", min=1, help="Run only the first N days of the scenario (default: all of them)."
        ),
    ] = None,
    as_json: JsonOption = False,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report", help="Also write a self-contained HTML page: the week and each criterion's evidence."
        ),
    ] = None,
    budget_tokens: Annotated[
        int | None,
        typer.Option("--budget-tokens", min=1, help="behaviour mode: refuse to spend more tokens."),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="behaviour mode: the judge's model (default: the respond binding)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="behaviour mode: the model the agent runs on (default: the respond binding)."
        ),
    ] = None,
    group_chat: Annotated[
        str,
        typer.Option(
            "--group-chat",
            help="Where the scenario's group chat is said: `irc` (a real IRC room on a private ngircd), "
            "`send` (`persyn send --channel irc`, no server), or `auto` (irc when ngircd is installed).",
        ),
    ] = "auto",
    scenario: Annotated[
        Path | None,
        typer.Option(
            "--scenario",
            help="A week of your own (TOML, the shape of the shipped evals/scenarios/week.toml).",
        ),
    ] = None,
    work: Annotated[
        Path | None,
        typer.Option(
            "--work",
            help="Where the scratch deployment is made (a new empty directory; default: a temporary one, kept).",
        ),
    ] = None,
) -> None:
    """Drive an agent through a simulated week and show whether it is the same someone at the end.

    A scratch deployment is made (never the operator's live agent) and the real daemon runs
    it day by day on a moved clock: people talk to it on two channels, it is restarted, its
    heartbeat is deleted on day 6. Then eleven checkers, one per line of SPEC §9, read its
    store, transcripts, traces, activity log and usage ledger, and each prints pass or fail
    with the evidence. Exit status: 0 when every criterion passes, 1 when any fails, 2 on a
    usage error. The run's usage is recorded in its own scratch deployment, never the agent's.
    """
    from rich.console import Console

    from persyn.core.errors import InputError
    from persyn.evals.checks import run_checkers
    from persyn.evals.evidence import load_evidence
    from persyn.evals.report import render_html, render_json, render_table
    from persyn.evals.runner import EvalRunError, run_week
    from persyn.evals.scenario import load_scenario

    chosen = _mode(mode)
    if chosen == "mechanics" and (budget_tokens is not None or judge is not None or model is not None):
        raise _usage_error("--budget-tokens, --judge and --model apply to --mode behaviour only")
    if group_chat not in ("auto", "irc", "send"):
        raise _usage_error(f"--group-chat {group_chat!r}: choose auto, irc or send")
    try:
        week = load_scenario(scenario)
    except InputError as exc:
        raise _usage_error(str(exc)) from exc
    if days is not None:
        if days > len(week.days):
            raise _usage_error(f"--days {days} is more than the scenario's {len(week.days)} days")
        week = week.model_copy(update={"days": week.days[:days]})
    live_home: Path | None = None
    if agent is not None:
        live_home = _live_home(agent)
        week = week.model_copy(
            update={
                "agent": agent,
                "others": tuple(o for o in week.others if o.casefold() != agent.casefold()),
            }
        )
    console = Console(stderr=as_json)
    behaviour: tuple[str, str] | None = None
    if chosen == "behaviour":
        behaviour = _behaviour_models(model, judge)
        _check_budget(week, *behaviour, budget_tokens, console)
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="persyn-eval-"))
    elif work.exists() and any(work.iterdir()):
        raise _usage_error(f"--work {str(work)!r} is not empty: the eval makes a deployment of its own there")
    # SIGTERM unwinds like Ctrl-C, so the week's daemon is stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        log = asyncio.run(
            run_week(
                week,
                work,
                lambda line: console.print(f"[dim]{line}[/dim]"),
                model=None if behaviour is None else behaviour[0],
                copy_of=live_home,
                group_chat=group_chat,
            )
        )
    except EvalRunError as exc:
        typer.secho(f"error: the week could not be driven: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from exc
    evidence = asyncio.run(load_evidence(work, week.criteria))
    verdicts = run_checkers(evidence)
    if behaviour is not None:
        from persyn.evals.behaviour import judge_week

        verdicts = asyncio.run(judge_week(verdicts, log, week.agent, behaviour[1]))
    if report is not None:
        report.write_text(render_html(verdicts, log), encoding="utf-8")
    if as_json:
        echo(render_json(verdicts, log))
    else:
        render_table(verdicts, log, console)
    if not all(v.passed for v in verdicts):
        raise typer.Exit(1)


def _live_home(agent: str) -> Path:
    """The operator's deployment home, checked to have `agent` (a usage error if not)."""
    from persyn.core.config import load_settings
    from persyn.core.errors import ConfigError

    try:
        settings = load_settings()
        settings.agent(agent)
    except ConfigError as exc:
        raise _usage_error(f"--agent {agent!r}: {exc}") from exc
    return settings.home


def _behaviour_models(model: str | None, judge: str | None) -> tuple[str, str]:
    """The model the agent runs on and the judge's: given, else the operator's respond binding."""
    from persyn.core.config import Task, load_settings
    from persyn.core.errors import ConfigError

    if model is not None and judge is not None:
        return model, judge
    try:
        settings = load_settings()
    except ConfigError as exc:
        raise _usage_error(f"behaviour mode needs the respond model: {exc}") from exc
    respond = (
        settings.model_for(settings.agents[0], Task.RESPOND)
        if settings.agents
        else settings.models.chain_for_task(Task.RESPOND)[0]
    )
    return model or respond, judge or respond


def _check_budget(week: Scenario, model: str, judge: str, budget: int | None, console: Console) -> None:
    """Print the week's estimate; refuse (exit 2) before any call when it exceeds `budget`."""
    from persyn.core.config import load_settings
    from persyn.core.errors import ConfigError
    from persyn.evals.behaviour import estimate_week
    from persyn.usage.pricing import price_for

    try:
        prices = load_settings().prices
    except ConfigError:
        prices = {}
    estimate = estimate_week(week, price_for(prices, model), price_for(prices, judge))
    console.print(
        estimate.describe(model) + f"; judge {judge}", markup=False, highlight=False, soft_wrap=True
    )
    if budget is not None and estimate.tokens > budget:
        raise _usage_error(
            f"the week would take ~{estimate.tokens:,} tokens, more than --budget-tokens {budget:,}; "
            "nothing was run (raise the budget, or run fewer --days)"
        )


def _mode(mode: str) -> Literal["mechanics", "behaviour"]:
    if mode == "mechanics":
        return "mechanics"
    if mode in ("behaviour", "behavior"):
        return "behaviour"
    raise _usage_error(f"--mode {mode!r} is not one of: mechanics, behaviour")


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
