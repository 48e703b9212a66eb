"""Issue 15 item 4d: `persyn usage --agent NAME` sums one agent's calls, like every other
command's `--agent`; without it, every agent's."""

from __future__ import annotations

import json

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def test_usage_of_one_agent(persyn: Persyn) -> None:
    assert persyn.run("init", "--name", "Bob").returncode == 0
    agents = {a["name"]: a["id"] for a in json.loads(persyn.run("agents", "list", "--json").stdout)}
    assert persyn.run("chat", "--agent", "Ada", input="one\n").returncode == 0
    assert persyn.run("chat", "--agent", "Bob", input="two\nthree\n").returncode == 0

    def respond_calls(*args: str) -> int:
        done = persyn.run("usage", "--json", *args)
        assert done.returncode == 0, done.stderr
        rows = {row["key"]: row for row in json.loads(done.stdout)["rows"]}
        return int(rows["respond"]["calls"]) if "respond" in rows else 0

    assert respond_calls() == 3
    assert respond_calls("--agent", "Ada") == 1
    assert respond_calls("--agent", "bob") == 2
    assert respond_calls("--agent", agents["Bob"], "--since", "1d") == 2
    by_agent = json.loads(persyn.run("usage", "--by", "agent", "--agent", "Bob", "--json").stdout)
    assert [row["key"] for row in by_agent["rows"]] == [agents["Bob"]]
    assert by_agent["agent_id"] == agents["Bob"]
    text = persyn.run("usage", "--agent", "Bob").stdout
    assert "Bob" in text.splitlines()[0]
    unknown = persyn.run("usage", "--agent", "Cy")
    assert unknown.returncode == 2 and "Cy" in unknown.stderr
