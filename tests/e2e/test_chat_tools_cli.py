"""Line-mode `persyn chat` shows a tool-using turn once (issue 33, item 11; SPEC App. B
rule 4): the narration before the tool is a committed segment, the answer after it streams
and is the reply sent. Nothing was revised, so no "(revised)" and no second copy of the
answer. The real `persyn chat` in a subprocess, with a scripted model that calls `calculate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def _script(path: Path) -> str:
    rules = [
        {
            "task": "respond",
            "match": "17 times 23",
            "times": 1,
            "reply": "Let me work that out.",
            "tool_calls": [{"name": "calculate", "args": {"expression": "17*23"}}],
        },
        {"task": "respond", "match": "17 times 23", "reply": "It is 391."},
    ]
    path.write_text(json.dumps(rules))
    return f"test:script@{path}"


@pytest.mark.parametrize("mode", ["deferred", "inline"])
def test_a_tool_using_turn_is_shown_once_and_not_as_revised(
    persyn: Persyn, tmp_path: Path, mode: str
) -> None:
    env = {
        "PERSYN_MODELS__DEFAULT": _script(tmp_path / "rules.json"),
        "PERSYN_DELIBERATION__MODE": mode,
    }
    done = persyn.run("chat", "--as", "Sam", input="What is 17 times 23?\n", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Ada: Let me work that out.",
        "· (using calculate…)",
        "Ada: It is 391.",
    ], done.stdout
    # What was said is the answer, once; the calculation is in the turn's trace, no refinement.
    (conversation,) = json.loads(persyn.run("conversations", "list", "--json").stdout)
    shown = json.loads(persyn.run("conversations", "show", conversation["id"], "--json").stdout)
    assert [(m["role"], m["text"]) for m in shown["messages"]] == [
        ("user", "What is 17 times 23?"),
        ("agent", "It is 391."),
    ]
