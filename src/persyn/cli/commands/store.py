"""`persyn store`: the deployment's database as a whole (copy it to another backend)."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import CliContext, fail, run
from persyn.cli.help import command_group
from persyn.present.render import progress_bar, table

__all__ = ["register"]

store_app = command_group("The deployment's database as a whole: copy it to another backend.")


@store_app.command("copy")
def store_copy(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="URL",
            help="The target: 'postgresql://user:password@host/db' or 'sqlite:///path/to/file.db'. "
            "It must be empty, or hold an interrupted copy of the same source (which is resumed).",
        ),
    ],
    source: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="URL",
            help="The source store (default: this deployment's, from storage_url).",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, metavar="ROWS", help="Rows per write transaction.")
    ] = 500,
) -> None:
    """Copy every table of the store (memories with their vectors, dialog, directory, graph,
    schedule, goals, flags...) into another database, then compare the row counts.
    Deployment-wide: every agent's data at once.

    SQLite to PostgreSQL when a deployment moves to several workers, PostgreSQL to SQLite
    for a backup. Stop Persyn first (the copy is one snapshot of the source; DBOS's queues
    are not copied). An interrupted copy resumes when the same command is run again. The
    usage ledger (usage.jsonl) is a file, not in the store: it is left where it is.

    Exit codes: 0 when every count agrees; 1 when some differ (listed); 2 for a bad URL, a
    server that cannot be reached, or a target that holds other data."""
    from persyn.store.copying import copy_store

    context = CliContext.of(ctx)
    origin = source or context.settings.database_url
    bar, update = progress_bar("copying rows")
    shown: list[bool] = []

    def progress(done: int, total: int) -> None:
        if not shown:  # only once both stores opened: a refusal is one line, with no bar
            shown.append(True)
            bar.start()
        update(done, total)

    try:
        report = run(copy_store(origin, to, batch_size=batch_size, progress=progress))
    finally:
        if shown:
            bar.stop()
    typer.echo(table(["table", "source", "target"], [(t.name, t.source, t.target) for t in report.tables]))
    if report.mismatched:
        names = ", ".join(t.name for t in report.mismatched)
        raise fail(
            f"the counts differ in {names}: was the source written to during the copy? Stop Persyn "
            "and run the same command again",
            1,
        )
    resumed = " (resumed)" if report.resumed else ""
    typer.echo(f"copied {report.rows} rows from {report.source} to {report.target}{resumed}; counts verified")


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")
