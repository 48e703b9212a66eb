"""`persyn memory`: import, recall, inspect, forget, cull and reindex long-term memory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, NowOption, run
from persyn.cli.help import command_group
from persyn.core.errors import PersynError
from persyn.present.render import block, dump_json, echo, message_line, one_line, progress_bar, table

if TYPE_CHECKING:
    from persyn.memory.importer import ImportProblem

__all__ = ["register"]


memory_app = command_group(
    "The agent's long-term memory: import history, recall, inspect, forget, cull, reindex."
)


def _scored_json(found: Any, *, explain: bool = False) -> list[dict[str, Any]]:
    """A recollection's ranking as JSON rows: a memory as before; a line of raw dialog with
    `"said": true`, its message id, speaker and channel, and `ref` null."""
    from persyn.memory.dialog_recall import SaidLine
    from persyn.ops.memory import explain as explained
    from persyn.ops.memory import explain_said

    rows: list[dict[str, Any]] = []
    memories = found.memories
    for item in found.ranked:
        if isinstance(item, SaidLine):
            row: dict[str, Any] = {
                "id": item.message.id,
                "ref": None,
                "said": True,
                "speaker": item.message.speaker_name,
                "channel": item.channel,
                "score": round(item.score, 6),
                "band": item.band.value,
                "tokens": item.tokens,
                "summary": item.message.text,
                "time": item.message.created_at.isoformat(),
            }
            if explain:
                row["explain"] = explain_said(item)
        else:
            row = {
                "id": item.record.id,
                "ref": item.record.ref,
                "score": round(item.score, 6),
                "band": item.band.value,
                "tokens": item.tokens,
                "summary": item.record.summary,
                "time": item.record.created_at.isoformat(),
            }
            if explain:
                row["explain"] = explained(memories, memories.records.index(item))
        rows.append(row)
    return rows


def _explain_line(explained: dict[str, float | None]) -> str:
    shown = [
        f"{'keywords' if name == 'keyword' else name} {'-' if value is None else f'{value:.2f}'}"
        for name, value in explained.items()
        if name != "cosine"
    ]
    cosine = explained["cosine"]
    shown[0] += f" (cosine {cosine:.2f})" if cosine is not None else " (no vector match)"
    return " · ".join(shown)


@memory_app.command("import")
def memory_import(
    ctx: typer.Context,
    path: Annotated[
        Path, typer.Argument(metavar="FILE.jsonl", help="One JSON object per line (see --help).")
    ],
    agent: AgentOption = None,
    extract: Annotated[
        bool,
        typer.Option(
            "--extract",
            help="Also extract the knowledge graph and observations from the imported dialog "
            "(model calls: the estimate is printed first; needs --budget).",
        ),
    ] = False,
    budget: Annotated[
        int | None,
        typer.Option("--budget", min=0, metavar="TOKENS", help="With --extract: stop before spending more."),
    ] = None,
    as_contact: Annotated[
        list[str] | None,
        typer.Option(
            "--as",
            metavar="NAME=CONTACT",
            help="The person called NAME in the file is this existing contact (an id or a name only "
            "they go by), typically yourself; repeat for several.",
        ),
    ] = None,
    as_file: Annotated[
        Path | None,
        typer.Option("--as-file", metavar="FILE", help="NAME=CONTACT pairs, one per line (# comments)."),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Exit 1 when any line was rejected (the good ones are still imported)."
        ),
    ] = False,
) -> None:
    """Import history: one JSON object per line with `time` (ISO 8601), `channel`,
    `participants` (names or person ids), `summary`, and optional `importance`, `tags`,
    `sensitivity`, `ref`, `dialog` ([{speaker, text, time}]). Good lines are imported; bad
    lines are counted and the first few shown with their line numbers; re-importing a `ref`
    never duplicates. Imported conversations are stored closed and already remembered: no
    model is called for them unless you ask for --extract.

    A name nobody goes by becomes a contact of its own; `--as "Sam=CONTACT"` makes everything
    Sam said or took part in that contact's, as if they had said it live (import your own
    history with `--as "Me=<your contact>"`, as `persyn contacts list` shows you).

    Exit codes: 0 when every good line was imported or already present (rejected lines are
    reported on stderr, apart from the summary); 1 with --strict when some lines were rejected
    (the others are imported all the same; re-run after fixing them, nothing is duplicated);
    2 when nothing could be imported (no such file, a bad option, an unknown or ambiguous --as
    contact)."""
    from persyn.memory.importer import parse_speaker_contact, read_speaker_contacts
    from persyn.ops.memory import estimate_extraction, extract_imported, memory_ops

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    if not path.is_file():
        raise PersynError(f"no such file: {str(path)!r}")
    if extract and budget is None:
        raise PersynError("--extract needs --budget TOKENS (--budget 0 prints the estimate only)")
    if budget is not None and not extract:
        raise PersynError("--budget applies to --extract only")
    speakers = [parse_speaker_contact(text, "--as") for text in as_contact or []]
    if as_file is not None:
        speakers.extend(read_speaker_contacts(as_file))

    async def _import() -> Any:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            if ops.degraded:
                typer.secho(
                    f"· {ops.degraded}; importing without vectors (run `persyn memory reindex` later)",
                    err=True,
                )
            await ops.attributed(speakers)  # every --as contact exists, before the progress bar
            progress, update = progress_bar("embedding")
            with progress:
                report = await ops.import_file(path, update, speakers)
            _report_rejected(path, report.problems)
            repaired = f", links completed {report.repaired}" if report.repaired else ""
            typer.echo(
                f"imported {report.imported}, already present {report.duplicates}, "
                f"rejected {len(report.problems)}{repaired}"
            )
            if budget is None:
                return report
            estimate = await estimate_extraction(ops.store, settings, chosen, report.conversations)
        typer.echo(
            f"extraction estimate: {estimate.conversations} conversations, {estimate.calls} model calls, "
            f"about {estimate.tokens} tokens (budget {budget})"
        )
        if estimate.conversations and budget > 0:
            progress, update = progress_bar("extracting")
            with progress:
                done = await extract_imported(settings, chosen, estimate, budget, update)
            typer.echo(
                f"extracted {done.extracted} of {estimate.conversations} conversations, {done.tokens} tokens"
            )
            if done.stopped:
                typer.secho(
                    f"· stopped: {done.stopped}; run again with a larger --budget for the rest", err=True
                )
        return report

    report = run(_import())
    raise typer.Exit(1 if strict and report.problems else 0)


_SHOWN_PROBLEMS = 5


def _report_rejected(path: Path, problems: Sequence[ImportProblem]) -> None:
    """The lines not imported, apart from the records: how many, and the first few."""
    if not problems:
        return
    shown = problems[:_SHOWN_PROBLEMS]
    lines = "line" if len(problems) == 1 else "lines"
    which = f" (the first {len(shown)})" if len(shown) < len(problems) else ""
    echo(f"rejected {len(problems)} {lines} of {path}{which}:", err=True, fg=typer.colors.YELLOW)
    for problem in shown:
        echo(f"  {path}:{problem.line}: {one_line(problem.reason)}", err=True, fg=typer.colors.YELLOW)
    if len(shown) < len(problems):
        echo(f"  … and {len(problems) - len(shown)} more", err=True, fg=typer.colors.YELLOW)


@memory_app.command("recall")
def memory_recall(
    ctx: typer.Context,
    query: Annotated[str | None, typer.Argument(help="What to remember (omit with --queries).")] = None,
    agent: AgentOption = None,
    channel: Annotated[
        str | None, typer.Option("--channel", help="Channel key, e.g. terminal:terminal.")
    ] = None,
    participant: Annotated[
        list[str] | None,
        typer.Option("--participant", "-p", help="Who is present: a name or id (repeat)."),
    ] = None,
    now: NowOption = None,
    budget_tokens: Annotated[
        int | None, typer.Option("--budget-tokens", min=1, help="Context budget.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most this many records.")] = None,
    queries: Annotated[
        Path | None,
        typer.Option("--queries", help="Batch: JSONL of {id, query, channel?, participants?, now?}."),
    ] = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Show each result's score parts: similarity, keywords, date, recency, importance, participants.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Exactly the retrieval the agent uses when it answers, with each record's band. A name
    several contacts go by is an error listing them: give the id. With --explain, each
    result's score parts (each in [0, 1]; '-' = not counted for this query), whose weighted
    mean ([memory.weights]) is the score."""
    from persyn.ops.memory import memory_ops, read_queries

    cli = CliContext.of(ctx)
    cli.move_to(now)
    settings = cli.settings
    chosen = settings.agent(agent)
    if (query is None) == (queries is None):
        raise PersynError("give either a QUERY or --queries FILE")
    batch = read_queries(queries) if queries is not None else []

    async def _recall() -> None:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            if ops.degraded:
                typer.secho(f"· {ops.degraded}; keyword retrieval only", err=True)
            if queries is not None:
                for item in batch:
                    result = await ops.recollect(
                        item.query,
                        channel=item.channel or channel,
                        participants=item.participants or participant or [],
                        now=item.now or cli.now(),
                        budget_tokens=budget_tokens,
                        limit=limit,
                    )
                    echo(
                        dump_json(
                            {"id": item.id, "results": _scored_json(result, explain=explain)}, indent=None
                        )
                    )
                return
            assert query is not None
            found = await ops.recollect(
                query,
                channel=channel,
                participants=participant or [],
                now=cli.now(),
                budget_tokens=budget_tokens,
                limit=limit,
            )
            if as_json:
                echo(dump_json(_scored_json(found, explain=explain)))
                return
            _print_recollection(found, explain=explain)

    run(_recall())


def _print_recollection(found: Any, *, explain: bool) -> None:
    from persyn.memory.dialog_recall import SaidLine
    from persyn.ops.memory import explain as explained
    from persyn.ops.memory import explain_said

    if not found.ranked:
        echo("I don't remember anything about that here.")
    memories = found.memories
    for item in found.ranked:
        if isinstance(item, SaidLine):
            message = item.message
            echo(
                f"[{'said':>8}] {item.score:.3f}  {message.created_at:%Y-%m-%d}  {message.id}  {item.channel}"
            )
            echo(f"           {message.speaker_name}: {one_line(message.text)}")
            parts = explain_said(item)
        else:
            echo(
                f"[{item.band.value:>8}] {item.score:.3f}  {item.record.created_at:%Y-%m-%d}  {item.record.id}"
            )
            echo(f"           {one_line(item.record.summary)}")
            parts = explained(memories, memories.records.index(item))
        if explain:
            echo(f"           {_explain_line(parts)}")


@memory_app.command("list")
def memory_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 20,
    as_json: JsonOption = False,
) -> None:
    """The newest memories."""
    from persyn.ops.memory import memory_ops

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)

    async def _list() -> list[Any]:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            return await ops.store.list_records(chosen.id, limit=limit)

    records = run(_list())
    if as_json:
        echo(dump_json([r.model_dump(mode="json") for r in records]))
        return
    for record in records:
        echo(
            f"{record.id}  {record.created_at:%Y-%m-%d}  [{record.importance:>2}/10 {record.sensitivity.value}]  "
            f"{one_line(record.summary[:100])}"
        )


@memory_app.command("show")
def memory_show(
    ctx: typer.Context,
    record_id: Annotated[str, typer.Argument(metavar="ID")],
    agent: AgentOption = None,
    dialog: Annotated[
        bool, typer.Option("--dialog", help="Also print the raw dialog behind it (remember harder).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """One memory with all its metadata; --dialog pulls the verbatim exchange behind it."""
    from persyn.ops.memory import memory_ops

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)

    async def _show() -> Any:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            record, messages = await ops.show(record_id)
            return record, messages, await ops.emotions(record.id)

    record, messages, feelings = run(_show())
    if as_json:
        payload: dict[str, Any] = {"record": record.model_dump(mode="json"), "emotions": feelings}
        if dialog:
            payload["dialog"] = [m.model_dump(mode="json") for m in messages]
        echo(dump_json(payload))
        return
    for key, value in record.model_dump(mode="json").items():
        echo(f"{key:>16}: {block(str(value), ' ' * 18)}")
    if feelings:  # SPEC §4.9: the state over the conversation, strongest first
        ranked = sorted(feelings.items(), key=lambda item: (-item[1], item[0]))
        echo(f"{'emotions':>16}: " + ", ".join(f"{category} {value:.0%}" for category, value in ranked))
    if dialog:
        if not messages:
            echo(
                "(no verbatim dialog is kept for this memory: it is past the retention window or was imported without it)"
            )
        for message in messages:
            echo(message_line(message))


@memory_app.command("forget")
def memory_forget(
    ctx: typer.Context, record_id: Annotated[str, typer.Argument(metavar="ID")], agent: AgentOption = None
) -> None:
    """Delete one memory (its vector and index entries too) and the verbatim dialog it was made
    from, so recall of what was said cannot bring it back."""
    from persyn.ops.memory import memory_ops

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)

    async def _forget() -> Any:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            return await ops.forget(record_id)

    record = run(_forget())
    echo(f"forgot {record.id}: {one_line(record.summary[:100])}")


@memory_app.command("stats")
def memory_stats(
    ctx: typer.Context,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """How many memories, by channel, sensitivity, importance and kind, and which encoder made
    their vectors: a table per grouping (--json: the same numbers as one object)."""
    from persyn.ops.memory import memory_ops

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)

    async def _stats() -> dict[str, object]:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            return await ops.store.record_stats(chosen.id)

    stats = run(_stats())
    if as_json:
        echo(dump_json(stats))
        return
    echo(_stats_text(chosen.name, stats))


def _counts(value: object) -> list[tuple[str, int]]:
    """A `record_stats` grouping (name -> count) as rows, largest first."""
    grouped: dict[Any, Any] = value if isinstance(value, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    return sorted(((str(k), int(v)) for k, v in grouped.items()), key=lambda row: (-row[1], row[0]))


def _stats_text(agent_name: str, stats: dict[str, object]) -> str:
    """`record_stats` as the other commands print: a line, then a table per grouping."""
    from persyn.core.records import Sensitivity

    count, oldest, newest = stats["count"], stats["oldest"], stats["newest"]
    if not count or not isinstance(oldest, datetime) or not isinstance(newest, datetime):
        return (
            f"{one_line(agent_name)} has no memories yet: they form when a conversation closes, "
            "or come from `persyn memory import`."
        )
    levels = [level.value for level in Sensitivity]
    by_level = sorted(
        _counts(stats["by_sensitivity"]), key=lambda row: levels.index(row[0]) if row[0] in levels else 99
    )
    by_importance = sorted(_counts(stats["by_importance"]), key=lambda row: -int(row[0]))
    vectors = [*_counts(stats["vectors_by_model"]), ("without a vector", int(str(stats["without_vector"])))]
    sections = [
        table(("channel", "memories"), _counts(stats["by_channel"])),
        table(("sensitivity", "memories"), by_level),
        table(("importance", "memories"), by_importance),
        table(("kind", "memories"), _counts(stats["by_kind"])),
        table(("encoder", "memories"), vectors),
        table(("dimensions", "memories"), _counts(stats["vectors_by_dims"])),
    ]
    first = (
        f"{one_line(agent_name)} has {count} memories, from {oldest:%Y-%m-%d %H:%M} "
        f"to {newest:%Y-%m-%d %H:%M} UTC."
    )
    return "\n\n".join([first, *sections])


@memory_app.command("cull")
def memory_cull(
    ctx: typer.Context,
    agent: AgentOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be deleted.")] = False,
    now: NowOption = None,
) -> None:
    """Delete memories rated below [memory] cull_below_importance AND older than
    cull_after_days (defaults 3/10 and 14 days); important memories stay regardless of age."""
    from persyn.ops.memory import memory_ops

    cli = CliContext.of(ctx)
    cli.move_to(now)
    settings = cli.settings
    chosen = settings.agent(agent)

    async def _cull() -> list[Any]:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            return await ops.cull(dry_run=dry_run, now=cli.now())

    doomed = run(_cull())
    verb = "would delete" if dry_run else "deleted"
    echo(f"{verb} {len(doomed)} memories")
    for record in doomed:
        echo(
            f"  {record.id}  {record.created_at:%Y-%m-%d}  [{record.importance}/10]  {one_line(record.summary[:90])}"
        )


@memory_app.command("reindex")
def memory_reindex(ctx: typer.Context, agent: AgentOption = None) -> None:
    """Re-embed memories whose vectors came from another encoder (after changing [memory] embedder)."""
    from persyn.ops.memory import memory_ops

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)

    async def _reindex() -> int:
        async with memory_ops(settings, chosen, cli.clock) as ops:
            progress, update = progress_bar("re-embedding")
            with progress:
                return await ops.reindex(update)

    echo(f"re-embedded {run(_reindex())} memories")


def register(app: typer.Typer) -> None:
    app.add_typer(memory_app, name="memory")
