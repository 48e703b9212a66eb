"""The knowledge graph through the real CLI: a conversation closes, the daemon's background
queue extracts entities and relations, `persyn graph query|path|stats` browse them (issue 5)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_graph_query_and_path_after_a_conversation_closes(persyn: Persyn, tmp_path: Path) -> None:
    script = tmp_path / "mind.json"
    extraction = {
        "entities": [
            {"name": "Ann", "kind": "person", "attributes": [{"name": "role", "value": "engineer"}]}
        ],
        "relations": [
            {"source": "Ann", "relation": "works at", "target": "Acme"},
            {"source": "Acme", "relation": "based in", "target": "Porto"},
            {"source": "Bo", "relation": "lives in", "target": "Porto"},
        ],
        "sensitivity": "private",
    }
    rules = [{"task": "extract", "match": "for the knowledge graph", "output": extraction}]
    script.write_text(json.dumps({"rules": rules}))
    env = {
        "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
        "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "0.02",
        "PERSYN_DISPATCH__HOUSEKEEPING_SECONDS": "0.5",
    }
    chatting = {**env, "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "60"}
    # The chat itself never closes the conversation (however slow the machine): the daemon does.
    done = persyn.run(
        "chat", "--as", "Sam", input="Ann works at Acme, in Porto. Bo lives there too.\n", env=chatting
    )
    assert done.returncode == 0, done.stderr
    empty = persyn.run("graph", "query", "Ann")
    assert empty.returncode == 2 and "no entity named 'Ann'" in empty.stderr

    daemon = persyn.start_daemon("run", env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "3 relations" not in persyn.run("graph", "stats").stdout:
            time.sleep(1)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert persyn.run("graph", "stats").stdout.strip() == "4 entities, 4 mentions, 3 relations"

    shown = persyn.run("graph", "query", "ann", "--hops", "2")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("Ann (person) ")
    assert "  role: engineer" in lines
    assert any(line.startswith("  Ann —works at→ Acme  [terminal:terminal, private, ") for line in lines)
    assert any("Acme —based in→ Porto" in line for line in lines)
    assert not any("Bo" in line for line in lines)  # three hops away

    as_json = json.loads(persyn.run("graph", "query", "Porto", "--json").stdout)
    assert as_json["entity"]["name"] == "Porto"
    assert sorted(r["source"] for r in as_json["relations"]) == ["Acme", "Bo"]

    path = persyn.run("graph", "path", "Ann", "Bo")
    assert path.returncode == 0, path.stderr
    assert path.stdout.splitlines()[0] == "Ann → Bo: 3 hop(s)"
    too_far = persyn.run("graph", "path", "Ann", "Bo", "--max-hops", "2")
    assert too_far.returncode == 1 and "not connected within 2 hops" in too_far.stdout

    # Seen from another channel with nobody present, the private facts are not there.
    elsewhere = persyn.run("graph", "query", "Ann", "--channel", "slack:general")
    assert elsewhere.returncode == 2 and "no entity named 'Ann'" in elsewhere.stderr
    here = persyn.run("graph", "query", "Ann", "--channel", "terminal:terminal")
    assert here.returncode == 0 and "works at" in here.stdout
    bad = persyn.run("graph", "query", "Ann", "--channel", "nochannel")
    assert bad.returncode == 2 and "SERVICE:CHANNEL" in bad.stderr
    assert "shortest chain" in persyn.run("graph", "path", "--help").stdout
