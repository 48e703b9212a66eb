"""Stored text on the operator's terminal: the one place it is made safe to print.

Messages, memories, names, facts and goals come from people, models and imported files.
Printed raw, an escape sequence among them is obeyed by the terminal (it can recolour,
retitle, hide earlier lines, forge a hyperlink, or move the cursor over what came before),
and a newline inside a one-line field forges a line of its own. So every command that prints
stored text passes it through `visible` (or writes it with `echo`):

- control characters (C0 except newline and tab, DEL, C1) and the invisible characters that
  reorder or split lines (bidirectional overrides and isolates, line and paragraph
  separators) are shown as Python escapes: ESC is `\\x1b`, U+202E is `\\u202e`;
- newlines and tabs stay where the layout allows them (`multiline=True`); `one_line`
  shows them as `\\n` and `\\t` for fields in a one-line-per-item listing; `block` indents
  the continuation lines of a multi-line text under its first line, so that no stored text
  can pass for a line the command wrote;
- nothing is read as markup: output goes through click, never a Rich console, so `[bold]`
  or `[link=...]` in a message prints as those characters.

`--json` output goes through `dump_json`: `ensure_ascii` escapes every control character
(`\\u001b`), so the output is valid JSON and carries the exact stored text, and the raw
bytes on the terminal contain none.

A backslash is printed as itself, so stored text that literally spells `\\x1b` looks the same
as an escaped ESC: the rendering is for reading, `--json` for exact content.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import typer

__all__ = [
    "block",
    "dump_json",
    "echo",
    "error_text",
    "message_line",
    "one_line",
    "progress_bar",
    "table",
    "trace_lines",
    "visible",
]

# Invisible format characters that change how a line reads: bidirectional embeddings,
# overrides and isolates (the "Trojan Source" characters), and marks.
_REORDERING = frozenset("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _REORDERING


def visible(text: str, *, multiline: bool = True) -> str:
    """`text` with every control character shown as an escape; newlines and tabs kept when
    `multiline`."""
    if text.isprintable() and not (set(text) & _REORDERING):
        return text  # the common case, without a per-character walk
    kept = "\n\t" if multiline else ""
    return "".join(char if char in kept else (_escape(char) if _hidden(char) else char) for char in text)


def one_line(value: object) -> str:
    """A field of a one-line listing: control characters, newlines and tabs shown as escapes."""
    return visible(str(value), multiline=False)


def block(text: str, indent: str = "    ") -> str:
    """A multi-line stored text whose continuation lines are indented under its first."""
    return visible(text).replace("\n", "\n" + indent)


def echo(text: str = "", *, err: bool = False, **style: Any) -> None:
    """Print one piece of output made of stored text: `visible` (newlines kept), then styled."""
    typer.secho(visible(text), err=err, **style)


def dump_json(payload: Any, *, indent: int | None = 2) -> str:
    """JSON for `--json`: escapes every control and non-ASCII character, so it is always valid
    JSON and never writes a raw control character to the terminal."""
    return json.dumps(payload, indent=indent, ensure_ascii=True, default=str)


# What a wrapped database error appends to our message: the statement, its parameters (stored
# text, possibly long) and a link to SQLAlchemy's documentation.
_DATABASE_NOISE = ("(Background on this error at:", "[SQL:", "[parameters:")


def error_text(exc: BaseException) -> str:
    """An error as the operator reads it: our message (for an `OSError`, what refused and
    which file), without the SQL noise a wrapped database error carries; shown `visible`."""
    if isinstance(exc, OSError):
        where = f" {str(exc.filename)!r}" if exc.filename else ""
        return visible(f"cannot use{where}: {exc.strerror or exc}")
    lines = [line for line in str(exc).splitlines() if not line.startswith(_DATABASE_NOISE)]
    return visible("\n".join(lines))


def message_line(message: Any) -> str:
    """One dialog message: the speaker's name on one line, the text's own lines indented."""
    return f"[{message.created_at:%Y-%m-%d %H:%M:%S}] {one_line(message.speaker_name)}: {block(message.text)}"


def trace_lines(trace: dict[str, Any]) -> list[str]:
    lines = [f"deliberation: {trace.get('mode', '?')}"]
    for critique in trace.get("critiques") or []:
        lens = critique.get("lens", "?")
        if critique.get("skipped"):
            lines.append(f"{lens}: skipped ({critique['skipped']})")
            continue
        objections = critique.get("objections") or []
        if not objections:
            lines.append(f"{lens}: no objections")
        for objection in objections:
            lines.append(
                f'{lens}: [{objection.get("kind")}] "{objection.get("span")}" - {objection.get("explanation")}'
            )
    for used in trace.get("tools") or []:
        lines.append(f"tool {used.get('name')}: {used.get('status')}")
    for trip in trace.get("trips") or []:
        what = f" ({trip.get('tool')})" if trip.get("tool") else ""
        lines.append(
            f"loop breaker {trip.get('reason')}{what}: {trip.get('count')} of at most {trip.get('limit')}"
        )
    decision = trace.get("decision")
    if decision:
        lines.append(f"decided to {decision.get('action')}: {decision.get('reason')}")
    if trace.get("failed"):  # the turn ended on a failure it recorded (a full disk)
        lines.append(f"failed: {trace['failed']}")
    return lines


def progress_bar(description: str) -> tuple[Any, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=False
    )
    task = progress.add_task(description, total=None)

    def update(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    return progress, update


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned (they are
    counts), a rule under the headers; every cell shown as `one_line`."""
    lines = [tuple(headers), *(tuple(one_line(cell) for cell in row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]

    def fmt(cells: tuple[str, ...]) -> str:
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join((cells[0].ljust(widths[0]), *rest)).rstrip()

    return "\n".join([fmt(lines[0]), "  ".join("-" * w for w in widths), *(fmt(line) for line in lines[1:])])
