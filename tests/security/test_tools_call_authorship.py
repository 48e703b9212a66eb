"""The operator cannot author the agent's goals or reminders through `persyn tools call`
(issue 33, item 12b). SPEC §4.8: goals are records the agent creates for itself with its goal
tool, "there is no other authoring path"; §4.7: reminders are the ones the agent set, and fire
as its own objective (item 10). `tools call` runs a tool "exactly as the agent would", which
made the operator's words the agent's intent. Refused with one clear line and exit 2, nothing
stored; the operator may still list goals and reminders, close a goal and cancel a reminder.

The real `persyn` CLI; the one goal comes to exist the only legitimate way, by the agent's own
tool call in a chat (a scripted model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def _refused(persyn: Persyn, name: str, args: dict[str, object], *, because: str, **env: str) -> None:
    done = persyn.run("tools", "call", name, "--args", json.dumps(args), env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and because in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_goals_and_reminders_are_never_authored_by_the_operator(persyn: Persyn, tmp_path: Path) -> None:
    _refused(persyn, "create_goal", {"description": "Learn Rust"}, because="create_goal is the agent's own")
    # Through `call_tool`, when the goal tools are offered deferred.
    _refused(
        persyn,
        "call_tool",
        {"name": "create_goal", "arguments": {"description": "Learn Rust"}},
        because="create_goal is the agent's own",
        PERSYN_TOOLS__DEFERRED='["create_goal"]',
    )
    _refused(persyn, "set_reminder", {"objective": "Buy milk", "in_minutes": 5}, because="set_reminder is")
    assert "No goals" in persyn.run("goals", "list").stdout
    assert "No reminders" in persyn.run("reminders", "list").stdout

    # The agent sets itself a goal: the one authoring path.
    rules = [
        {
            "task": "respond",
            "match": "follow up",
            "times": 1,
            "tool_calls": [{"name": "create_goal", "args": {"description": "Follow up on Sam's thesis"}}],
        },
        {"task": "respond", "match": "follow up", "reply": "I will."},
    ]
    (tmp_path / "rules.json").write_text(json.dumps(rules))
    script = {"PERSYN_MODELS__DEFAULT": f"test:script@{tmp_path / 'rules.json'}"}
    assert persyn.run("chat", input="Please follow up on my thesis\n", env=script).returncode == 0
    (goal,) = json.loads(persyn.run("goals", "list", "--json").stdout)
    assert goal["description"] == "Follow up on Sam's thesis"

    _refused(
        persyn,
        "update_goal",
        {"goal_id": goal["id"], "description": "Write Sam's thesis for him"},
        because="revising or reopening a goal is the agent's own",
    )
    # Closing it, saying how it ended, is the operator's to do.
    closed = persyn.run(
        "tools",
        "call",
        "update_goal",
        "--channel",
        "terminal:terminal",
        "--args",
        json.dumps({"goal_id": goal["id"], "status": "retired", "outcome": "Sam finished it"}),
    )
    assert closed.returncode == 0, closed.stderr
    (after,) = json.loads(persyn.run("goals", "list", "--json").stdout)
    assert (after["description"], after["status"]) == ("Follow up on Sam's thesis", "retired")
    _refused(
        persyn,
        "update_goal",
        {"goal_id": goal["id"], "status": "open"},
        because="revising or reopening a goal is the agent's own",
    )
