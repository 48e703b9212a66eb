"""`persyn doctor`: checking a deployment and saying what to fix."""

from __future__ import annotations

import typer

from persyn.cli.context import CliContext, run

__all__ = ["register"]


def doctor(ctx: typer.Context) -> None:
    """Check configuration, database and model reachability, and say what to fix.

    Says which model "auto" chose in this process and why, and checks every model of a
    fallback chain. Deployment-wide: every agent's models and the shared database."""
    from persyn.ops.doctor.checks import run_doctor

    raise typer.Exit(run(run_doctor(CliContext.of(ctx).home)))


def register(app: typer.Typer) -> None:
    app.command()(doctor)
