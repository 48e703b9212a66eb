"""`persyn traces`: the local span store, read with no collector (SPEC App. D)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import typer

from persyn.cli.context import CliContext, JsonOption, fail
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line, table, visible

if TYPE_CHECKING:
    from persyn.tracing import SpanRecord

__all__ = ["register"]

traces_app = command_group(
    "Traces of the agent's turns: one per message, reminder or heartbeat, with every model and "
    "tool call in it, timed (needs [tracing] enabled; read from data/traces/, no collector needed)."
)

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


@traces_app.command("list")
def traces_list(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option("--since", help="ISO time or a span like 30m, 12h, 7d; default: 1d.")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Only this agent's traces (name or id); default: every agent's."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many, newest.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """The recorded turns, oldest first: when, what kind, where, for whom, how long, how many
    model and tool calls, the tokens, and how the turn ended."""
    from persyn.tracing import read_spans, summarize

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = None if agent is None else settings.agent(agent)
    start = cli.since(since or "1d")
    summaries = summarize(read_spans(settings.traces_dir, since=start))
    if chosen is not None:
        summaries = [summary for summary in summaries if summary.agent_id == chosen.id]
    summaries = summaries[-limit:]
    if as_json:
        echo(dump_json([summary.model_dump(mode="json") for summary in summaries]))
        return
    if not summaries:
        echo("No traces recorded in that window." + ("" if settings.tracing.enabled else _OFF))
        return
    rows = [
        (
            f"{summary.start:%Y-%m-%d %H:%M:%S}",
            summary.event_id or summary.trace_id,
            summary.kind,
            summary.surface or "-",
            summary.participant or "-",
            f"{summary.duration_ms:.0f} ms",
            summary.model_calls,
            summary.tool_calls,
            f"{summary.input_tokens}/{summary.output_tokens}",
            summary.outcome or "-",
        )
        for summary in summaries
    ]
    headers = ("started", "event (or trace)", "kind", "surface", "participant", "took", "models", "tools")
    echo(table((*headers, "tokens in/out", "ended"), rows))


@traces_app.command("show")
def traces_show(
    ctx: typer.Context,
    event_id: Annotated[
        str,
        typer.Argument(metavar="EVENT_ID", help="The event a turn answered, or a trace id (32 hex digits)."),
    ],
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", "-a", help="Only if it is this agent's trace (name or id); default: any agent's."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """One turn as a timed tree: every span with its offset from the start, its duration, and
    what it carries (stage, model, tokens; tool and status; content when it was recorded)."""
    from persyn.core.ids import is_id
    from persyn.tracing import ATTR, read_spans, trace_id_of, trace_spans

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = None if agent is None else settings.agent(agent)
    wanted = event_id.strip()
    if is_id(wanted.upper()):
        trace_id = trace_id_of(wanted.upper())
    elif _TRACE_ID.match(wanted.lower()):
        trace_id = wanted.lower()
    else:
        raise fail(f"{event_id!r} is neither an event id (a ULID) nor a trace id (32 hex digits)")
    spans = trace_spans(read_spans(settings.traces_dir), trace_id)
    if not spans:
        hint = "" if settings.tracing.enabled else _OFF
        raise fail(f"no trace of {event_id!r} is stored under {settings.traces_dir}.{hint}")
    if chosen is not None and all(span.text_attribute(ATTR.AGENT) != chosen.id for span in spans):
        raise fail(f"the trace of {event_id!r} is not {chosen.name}'s ({chosen.id})")
    if as_json:
        echo(dump_json([span.model_dump(mode="json") for span in spans]))
        return
    echo("\n".join(tree_lines(spans)))


_OFF = " Tracing is off: set [tracing] enabled = true."


def tree_lines(spans: list[SpanRecord]) -> list[str]:
    """The spans as an indented tree in start order, each with its offset and duration."""
    ids = {span.span_id for span in spans}
    children: dict[str | None, list[SpanRecord]] = {}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else None
        children.setdefault(parent, []).append(span)
    origin = min(span.start for span in spans)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            offset = (span.start - origin).total_seconds() * 1000
            head = f"{'  ' * depth}{span.name}"
            timing = f"+{offset:.1f} ms  {span.duration_ms:.1f} ms"
            status = "  FAILED" if span.status == "error" else ""
            lines.append(one_line(f"{head:<40} {timing:>24}{status}  {_details(span)}".rstrip()))
            for key in ("persyn.input", "persyn.tool.arguments", "persyn.tool.result", "persyn.output"):
                text = span.text_attribute(key)
                if text:
                    label = key.rsplit(".", 1)[-1]
                    lines.append(f"{'  ' * (depth + 2)}{label}: {visible(text, multiline=False)[:300]}")
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return lines


def _details(span: SpanRecord) -> str:
    from persyn.tracing import ATTR

    parts: list[str] = []
    for key, label in (
        (ATTR.MODEL, "model"),
        (ATTR.TOOL_STATUS, "status"),
        (ATTR.SURFACE, "on"),
        (ATTR.PARTICIPANT, "for"),
        (ATTR.ACTION, "ended"),
    ):
        value = span.text_attribute(key)
        if value:
            parts.append(f"{label}={value}")
    if ATTR.INPUT_TOKENS in span.attributes:
        tokens = f"tokens={span.int_attribute(ATTR.INPUT_TOKENS)}/{span.int_attribute(ATTR.OUTPUT_TOKENS)}"
        cached = span.int_attribute(ATTR.CACHE_READ_TOKENS)
        parts.append(tokens + (f" (cached {cached})" if cached else ""))
    return "  ".join(parts)


def register(app: typer.Typer) -> None:
    app.add_typer(traces_app, name="traces")
