"""Contacts that `persyn memory import` brings in are last seen when the history says, not
when it was imported (issue 33, item 12a): a person the file names is first and last seen at
their line's time (a speaker: at their last dialog message), a later line moves that forward
and an older one never back, and a contact met live keeps the later, live time."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def _lines(operator_id: str) -> list[dict[str, Any]]:
    return [
        {
            "time": "2024-03-04T18:30:00Z",
            "channel": "discord:general",
            "participants": ["Ann"],
            "summary": "Ann and Bo planned the trip with me.",
            "dialog": [
                {"speaker": "Ann", "text": "Shall we go in May?", "time": "2024-03-04T18:31:00Z"},
                {"speaker": "Ada", "text": "May works.", "time": "2024-03-04T18:32:00Z"},
                {"speaker": "Bo", "text": "I'll book the train.", "time": "2024-03-04T18:40:00Z"},
            ],
        },
        {
            "time": "2024-05-01T09:00:00Z",
            "channel": "discord:general",
            "participants": ["Ann", operator_id],
            "summary": "Ann and the operator told me about the trip.",
        },
        {
            "time": "2023-01-01T12:00:00Z",
            "channel": "discord:general",
            "participants": ["Ann"],
            "summary": "I first met Ann.",
        },
    ]


def _seen(persyn: Persyn) -> dict[str, datetime]:
    """Each contact's last interaction, by id."""
    listed = persyn.run("contacts", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {c["id"]: datetime.fromisoformat(c["last_interaction_at"]) for c in json.loads(listed.stdout)}


def _named(persyn: Persyn) -> dict[str, str]:
    return {c["display_name"]: c["id"] for c in json.loads(persyn.run("contacts", "list", "--json").stdout)}


def test_imported_contacts_are_last_seen_when_the_history_says(persyn: Persyn, tmp_path: Path) -> None:
    before = datetime.now(UTC)
    assert persyn.run("chat", input="hello\n").returncode == 0
    ((operator, live),) = _seen(persyn).items()
    assert live >= before.replace(microsecond=0)

    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(line) + "\n" for line in _lines(operator)))
    done = persyn.run("memory", "import", str(history))
    assert done.returncode == 0, done.stderr

    named = _named(persyn)
    assert _seen(persyn) == {
        operator: live,  # met live since: the older history does not move it back
        named["Ann"]: datetime(2024, 5, 1, 9, tzinfo=UTC),  # her latest line, not the 2023 one
        named["Bo"]: datetime(2024, 3, 4, 18, 40, tzinfo=UTC),  # when he last spoke
    }
    shown = persyn.run("contacts", "list").stdout
    (ann,) = [row for row in shown.splitlines() if " Ann " in row]
    assert "last seen 2024-05-01 09:00" in ann, shown
