"""The CLI behaves the same way everywhere (issue 33, item 13): every command that reads an
agent's data takes `--agent`, or its help says plainly that it is deployment-wide; an id that
names nothing is one `error:` line and exit 2, as in every other command (`traces show` exited 1
on 4c92b50)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from persyn_cli import Persyn
from typer.core import TyperCommand, TyperGroup

from persyn.cli.root import app

# `init` reads no agent's data: it creates the deployment, or one more agent in it.
_CREATES = {("init",)}


def _commands(
    command: TyperCommand | TyperGroup, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], TyperCommand]]:
    """Every command (not group) under `command`, by its words."""
    if not isinstance(command, TyperGroup):
        yield path, command
        return
    context = typer.Context(command)
    for name in command.list_commands(context):
        child = command.get_command(context, name)
        assert isinstance(child, TyperCommand | TyperGroup)
        yield from _commands(child, (*path, name))


def test_every_command_takes_agent_or_says_it_is_deployment_wide() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    commands = dict(_commands(root))
    assert len(commands) > 40 and ("traces", "show") in commands  # the whole tree was walked
    unclear = [
        " ".join(path)
        for path, command in commands.items()
        if path not in _CREATES
        and not any("--agent" in getattr(param, "opts", ()) for param in command.params)
        and "deployment-wide" not in (command.help or "").lower()
    ]
    assert unclear == []


@pytest.mark.e2e
@pytest.mark.parametrize("event_id", ["BADID", "01JABCDEFGHJKMNPQRSTVWXYZ0", "0" * 32])
def test_traces_show_of_an_unknown_id_is_one_error_line_and_exit_2(persyn: Persyn, event_id: str) -> None:
    done = persyn.run("traces", "show", event_id)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and repr(event_id) in lines[0], done.stderr


@pytest.mark.e2e
def test_traces_show_with_an_unknown_agent_is_refused(persyn: Persyn) -> None:
    done = persyn.run("traces", "show", "01JABCDEFGHJKMNPQRSTVWXYZ0", "--agent", "Nobody")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Nobody" in done.stderr
