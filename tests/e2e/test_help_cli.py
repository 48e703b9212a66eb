"""Every command's and group's `--help`, rendered by the real `persyn`, shows every word of
its docstring and options: `[section]` names survive (markup once swallowed them), flags
carry no `<bool>` type, and lines break only where the next word would not fit.

The command tree is walked in this process (to know what to ask for); each help is rendered
by a `persyn` subprocess at a fixed terminal width.
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from persyn_cli import Persyn
from typer.core import TyperCommand, TyperGroup

from persyn.cli.root import app

pytestmark = pytest.mark.e2e

_COLUMNS = 80
_WIDTH = _COLUMNS - 2  # click leaves two columns free
_SECTION = re.compile(r"\[([a-z_]+)\]")


def _commands(
    command: TyperCommand | TyperGroup, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], TyperCommand | TyperGroup]]:
    yield path, command
    if isinstance(command, TyperGroup):
        context = typer.Context(command)
        for name in command.list_commands(context):
            child = command.get_command(context, name)
            assert isinstance(child, TyperCommand | TyperGroup)
            yield from _commands(child, (*path, name))


def _tree() -> list[tuple[tuple[str, ...], TyperCommand | TyperGroup]]:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    return list(_commands(root))


_TREE = _tree()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _paragraphs(help_text: str | None) -> list[str]:
    text = inspect.cleandoc(help_text or "").partition("\f")[0]
    return [_flat(p) for p in text.split("\n\n") if p.strip()]


def _first_sentence(help_text: str | None) -> str:
    """What a group lists for a command: its first paragraph up to the first full stop."""
    words = _paragraphs(help_text)[0].split() if help_text else []
    for index, word in enumerate(words):
        if word.endswith("."):
            return " ".join(words[: index + 1])
    return " ".join(words)


def _mid_sentence_breaks(rendered: str) -> list[str]:
    """Line pairs where the second line's first word would have fitted on the first: a break
    a docstring's layout put there, not the wrapping. In a definition list (options,
    commands) a row starts at column 2 and its continuation lines are indented further; in
    the description every line continues the one before until a blank line. A Rich panel's
    borders read as blanks, so Rich's layout is checked the same way."""
    found: list[str] = []
    lines = [line.replace("│", " ") for line in rendered.splitlines()]
    in_list = False
    for before, after in itertools.pairwise(lines):
        if before and not before.startswith(" "):
            in_list = before.startswith("╭") or (
                before.rstrip().endswith(":") and not before.startswith("Usage:")
            )
            continue
        if not before.strip() or not after.strip():
            continue
        indent = len(after) - len(after.lstrip())
        if in_list and (indent <= 2 or len(before.rstrip()) <= indent):
            continue  # a new row, or a row whose text starts on the next line
        first_word = after.split()[0]
        if len(before.rstrip()) + 1 + len(first_word) <= _WIDTH:
            found.append(f"{before.rstrip()!r} / {after.strip()!r}")
    return found


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], str]:
    persyn = Persyn(home=Path(tmp_path_factory.mktemp("help")) / "home")
    rendered: dict[tuple[str, ...], str] = {}
    for path, _ in _TREE:
        done = persyn.run(*path, "--help", COLUMNS=str(_COLUMNS))
        assert done.returncode == 0, (path, done.stderr)
        rendered[path] = done.stdout
    return rendered


def _name(path: tuple[str, ...]) -> str:
    return " ".join(("persyn", *path))


def test_the_tree_is_walked() -> None:
    names = {_name(path) for path, _ in _TREE}
    assert {
        "persyn",
        "persyn usage",
        "persyn memory",
        "persyn memory cull",
        "persyn heartbeat status",
    } <= names
    assert len(names) > 40


def test_every_section_named_in_a_docstring_is_shown(helps: dict[tuple[str, ...], str]) -> None:
    missing: list[str] = []
    for path, command in _TREE:
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        for section in sorted({s for text in texts for s in _SECTION.findall(text)}):
            if f"[{section}]" not in helps[path]:
                missing.append(f"{_name(path)} --help lacks [{section}]")
    assert not missing, "\n".join(missing)
    assert "Cost comes from the [prices] table" in _flat(helps[("usage",)])


def test_every_word_of_the_help_is_shown(helps: dict[tuple[str, ...], str]) -> None:
    missing: list[str] = []
    for path, command in _TREE:
        shown = _flat(helps[path])
        wanted = _paragraphs(command.help)
        wanted += [_flat(text) for p in command.params if (text := getattr(p, "help", None))]
        if isinstance(command, TyperGroup):
            context = typer.Context(command)
            wanted += [
                _first_sentence(child.help)
                for name in command.list_commands(context)
                if (child := command.get_command(context, name)) is not None
            ]
        missing += [f"{_name(path)} --help lacks {text!r}" for text in wanted if text not in shown]
    assert not missing, "\n".join(missing)


def test_flags_show_no_type(helps: dict[tuple[str, ...], str]) -> None:
    typed = [_name(path) for path, text in helps.items() if "<bool>" in text]
    assert not typed, f"flags show <bool> in: {typed}"


def test_lines_break_only_where_the_next_word_does_not_fit(helps: dict[tuple[str, ...], str]) -> None:
    broken = [f"{_name(path)}: {pair}" for path, text in helps.items() for pair in _mid_sentence_breaks(text)]
    assert not broken, "\n".join(broken)
