"""How `--help` reads: plain click text, every word as written.

Typer's default renders help as Rich markup, and three things go wrong there: a `[memory]`
or `[prices]` in a docstring is taken for a style tag and vanishes, flags show a `<bool>`
type, and a docstring's own line breaks stay in the middle of sentences. Plain click help
re-wraps each paragraph to the terminal (a paragraph opened by a line of just `\\b` keeps its
lines) and prints every character, and `--help` then needs no Rich import either. Click's
command listing cuts a summary off with "..." at a fixed width; `_Group` lists each
command's whole first sentence instead, wrapped.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

__all__ = ["command_group"]

# Longer than any first paragraph: click's short help then stops at the first sentence end.
_WHOLE_SENTENCE = 10_000


class _Group(TyperGroup):
    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(_WHOLE_SENTENCE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def command_group(help: str, **settings: Any) -> typer.Typer:
    """A Typer application, the root or a command group, as every one of ours is made."""
    return typer.Typer(help=help, cls=_Group, no_args_is_help=True, rich_markup_mode=None, **settings)
