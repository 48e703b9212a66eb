"""Deliberation through the real CLI: `persyn chat` with inline critique, then
`persyn conversations show --deliberation` and `persyn usage --by stage` (issue 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def _script(path: Path) -> Path:
    rules = [
        {"task": "respond", "reply": "Yes, I remember our trip to Lisbon last spring very clearly."},
        {
            "task": "critique",
            "match": "Lisbon",
            "output": {
                "objections": [
                    {
                        "kind": "confabulation",
                        "span": "I remember our trip to Lisbon",
                        "explanation": "no memory of a trip to Lisbon was recalled",
                    }
                ]
            },
        },
        {"task": "refine", "reply": "I don't have any memory of a trip to Lisbon. Tell me about it?"},
        {"task": "decide", "output": {"action": "speak", "reason": "it answers the question honestly"}},
    ]
    path.write_text(json.dumps({"rules": rules}))
    return path


def test_inline_critique_changes_what_is_said_and_is_inspectable(persyn: Persyn, tmp_path: Path) -> None:
    env = {
        "PERSYN_MODELS__DEFAULT": f"test:script@{_script(tmp_path / 'mind.json')}",
        "PERSYN_DELIBERATION__MODE": "inline",  # the terminal would defer by default
    }
    done = persyn.run("chat", "--as", "Sam", input="Remember our trip to Lisbon?\n", env=env)
    assert done.returncode == 0, done.stderr
    # The draft streamed, then the revision replaced it: only the refined reply was said.
    assert "(revised)" in done.stdout
    assert done.stdout.rstrip().endswith(
        "Ada: I don't have any memory of a trip to Lisbon. Tell me about it?"
    )

    listed = persyn.run("conversations", "list")
    conversation_id = listed.stdout.split()[0]
    shown = persyn.run("conversations", "show", conversation_id, "--deliberation")
    assert shown.returncode == 0, shown.stderr
    assert "Ada: I don't have any memory of a trip to Lisbon" in shown.stdout
    assert "Ada: Yes, I remember" not in shown.stdout  # the draft was never said
    assert '· provenance: [confabulation] "I remember our trip to Lisbon"' in shown.stdout
    assert "· decided to speak: it answers the question honestly" in shown.stdout

    usage = persyn.run("usage", "--by", "stage", "--json")
    stages = {row["key"] for row in json.loads(usage.stdout)["rows"]}
    assert {"respond", "critique:provenance", "refine", "decide"} <= stages
