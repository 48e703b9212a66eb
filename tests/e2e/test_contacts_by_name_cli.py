"""Issue 15 item 4c: every command that takes a contact takes a name exactly one contact goes
by as well as an id; a name several go by is an error listing each with its id, a name nobody
goes by an error saying so; neither changes anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e

LOGIN = {"LOGNAME": "alice", "USER": "alice"}


def _people(persyn: Persyn) -> dict[str, dict[str, object]]:
    listed = json.loads(persyn.run("contacts", "list", "--json").stdout)
    return {str(p["display_name"]): p for p in listed}


def _setup(persyn: Persyn, tmp_path: Path) -> dict[str, str]:
    """The operator (alice, from a chat) and two contacts an import made: Sam Okafor and Bo."""
    assert persyn.run("chat", input="hello\n", env=LOGIN).returncode == 0
    history = tmp_path / "history.jsonl"
    line = {"time": "2026-01-05T10:00:00Z", "channel": "terminal:terminal", "summary": "We met.", "ref": "1"}
    history.write_text(json.dumps({**line, "participants": ["Sam Okafor", "Bo"]}) + "\n")
    assert persyn.run("memory", "import", str(history)).returncode == 0
    return {str(name): str(p["id"]) for name, p in _people(persyn).items()}


def test_every_contact_command_takes_a_unique_name(persyn: Persyn, tmp_path: Path) -> None:
    ids = _setup(persyn, tmp_path)
    sam = ids["Sam Okafor"]
    shown = persyn.run("contacts", "show", "sam  OKAFOR")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"Sam Okafor (human) {sam}")
    first_word = persyn.run("contacts", "show", "Sam")
    assert first_word.returncode == 2
    assert f"has no contact named exactly 'Sam'; perhaps Sam Okafor ({sam})" in first_word.stderr

    steps = [
        (("contacts", "rename", "Sam Okafor", "Sam"), f"{sam} is now Sam"),
        (("contacts", "add-address", "Sam", "email", "sam@example.com"), f"Sam ({sam}) can be reached at"),
        (("contacts", "remove-address", "Sam", "email", "sam@example.com"), "no longer has email"),
        (("contacts", "prefer", "Sam", "terminal:terminal"), "Sam is reached first on terminal:terminal"),
        (("contacts", "attach", "Sam", "slack", "D1", "U1"), f"{sam} (Sam) identities:"),
        (("contacts", "detach", "Sam", "slack", "D1", "U1"), f"{sam} (Sam) identities:"),
        (("people", "observations", "Sam"), f"Sam ({sam})"),
        (("people", "dossier", "Sam"), "Nothing is known about Sam yet."),
        (("memory", "recall", "met", "--participant", "Sam", "--channel", "terminal:terminal"), "We met."),
        (("contacts", "merge", "Sam", "Bo", "--name", "Sam"), f"{sam} (Sam) now covers"),
    ]
    for args, said in steps:
        done = persyn.run(*args)
        assert done.returncode == 0 and said in done.stdout, (args, done.stdout, done.stderr)
    digest = json.loads(persyn.run("contacts", "show", "SAM", "--json").stdout)
    assert digest["person"]["id"] == sam and digest["preferred_channel"] == "terminal:terminal"
    assert sorted(_people(persyn)) == ["Sam", "alice"]


def test_a_name_several_or_no_contacts_go_by_is_refused_listing_them(persyn: Persyn, tmp_path: Path) -> None:
    ids = _setup(persyn, tmp_path)
    sam, bo = ids["Sam Okafor"], ids["Bo"]
    assert persyn.run("contacts", "rename", sam, "Sam").returncode == 0
    assert persyn.run("contacts", "rename", bo, "sam").returncode == 0
    before = persyn.run("contacts", "list", "--json").stdout
    ambiguous = [
        ("contacts", "show", "Sam"),
        ("contacts", "merge", "alice", "Sam"),
        ("contacts", "add-address", "Sam", "email", "sam@example.com"),
        ("people", "dossier", "Sam"),
        ("memory", "recall", "met", "--participant", "Sam"),
    ]
    for args in ambiguous:
        done = persyn.run(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "2 contacts match 'Sam': " in done.stderr and "give the id" in done.stderr, args
        assert f"Sam ({sam})" in done.stderr and f"sam ({bo})" in done.stderr, args
    for args in (("contacts", "rename", "Zed", "Z"), ("people", "observations", "Zed")):
        nobody = persyn.run(*args)
        assert nobody.returncode == 2 and "has no contact named exactly 'Zed'" in nobody.stderr, args
    assert persyn.run("contacts", "list", "--json").stdout == before
