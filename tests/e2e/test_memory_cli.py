"""`persyn memory ...` through the real CLI, and memory surviving a restart (issue 3)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e

HISTORY = [
    {
        "time": "2026-01-05T10:00:00Z",
        "channel": "terminal:terminal",
        "participants": ["Sam"],
        "summary": "I met Sam for the first time; he told me he builds violins in his workshop in Cremona.",
        "importance": 9,
        "tags": ["first meeting", "violins"],
        "ref": "hist:1",
        "dialog": [
            {"speaker": "Sam", "text": "Hi, I'm Sam. I build violins.", "time": "2026-01-05T10:00:00Z"},
            {
                "speaker": "Ada",
                "text": "How wonderful, where is your workshop?",
                "time": "2026-01-05T10:00:05Z",
            },
        ],
    },
    {
        "time": "2026-01-06T10:00:00Z",
        "channel": "terminal:terminal",
        "participants": ["Sam"],
        "summary": "Sam and I chatted about the weather being grey.",
        "importance": 2,
        "ref": "hist:2",
    },
    {
        "time": "2026-01-07T10:00:00Z",
        "channel": "slack:general",
        "participants": ["Sam"],
        "summary": "In the general channel Sam asked me about varnish recipes for violins.",
        "importance": 6,
        "sensitivity": "public",
        "ref": "hist:3",
    },
]


def _write_history(path: Path, extra_lines: list[str] | None = None) -> Path:
    lines = [json.dumps(item) for item in HISTORY]
    lines.insert(1, "{broken json")
    lines.insert(
        3, json.dumps({"time": "yesterday", "channel": "x", "participants": [], "summary": "bad time"})
    )
    lines.extend(extra_lines or [])
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_recall_show_forget_cull(persyn: Persyn, tmp_path: Path) -> None:
    history = _write_history(tmp_path / "history.jsonl")
    imported = persyn.run("memory", "import", str(history))
    assert imported.returncode == 0, imported.stderr  # two lines were rejected, reported apart
    assert "imported 3, already present 0, rejected 2" in imported.stdout
    assert f"{history}:2:" in imported.stderr
    assert f"{history}:4:" in imported.stderr
    again = persyn.run("memory", "import", str(history))
    assert "imported 0, already present 3" in again.stdout

    recall = persyn.run(
        "memory",
        "recall",
        "violins workshop",
        "--participant",
        "Sam",
        "--now",
        "2026-02-01T00:00:00",
        "--json",
    )
    assert recall.returncode == 0, recall.stderr
    results = json.loads(recall.stdout)
    # Only this channel's compartment: the slack record is not eligible on the terminal.
    assert [r["ref"] for r in results][:1] == ["hist:1"]
    assert "hist:3" not in [r["ref"] for r in results]
    assert {"id", "ref", "score", "band", "tokens"} <= set(results[0])
    other_channel = json.loads(
        persyn.run(
            "memory", "recall", "violins", "--channel", "slack:general", "--participant", "Sam", "--json"
        ).stdout
    )
    assert [r["ref"] for r in other_channel] == ["hist:3"]

    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        json.dumps({"id": "q1", "query": "violins", "participants": ["Sam"]})
        + "\n"
        + json.dumps({"id": "q2", "query": "varnish", "channel": "slack:general", "participants": ["Sam"]})
        + "\n"
    )
    batch = [
        json.loads(line)
        for line in persyn.run("memory", "recall", "--queries", str(queries), "--json").stdout.splitlines()
    ]
    assert [b["id"] for b in batch] == ["q1", "q2"]
    assert batch[1]["results"][0]["ref"] == "hist:3"

    first_id = results[0]["id"]
    shown = persyn.run("memory", "show", first_id, "--dialog")
    assert "I build violins." in shown.stdout, shown.stdout

    dry = persyn.run("memory", "cull", "--dry-run", "--now", "2026-03-01T00:00:00")
    assert "would delete 1 memories" in dry.stdout
    assert "weather" in dry.stdout
    stats_before = json.loads(persyn.run("memory", "stats", "--json").stdout)
    culled = persyn.run("memory", "cull", "--now", "2026-03-01T00:00:00")
    assert "deleted 1 memories" in culled.stdout
    listed = persyn.run("memory", "list", "--json")
    assert sorted(r["ref"] for r in json.loads(listed.stdout)) == ["hist:1", "hist:3"]
    assert stats_before != json.loads(persyn.run("memory", "stats", "--json").stdout)

    forgot = persyn.run("memory", "forget", first_id)
    assert forgot.returncode == 0
    assert persyn.run("memory", "show", first_id).returncode == 2
    bad = persyn.run("memory", "show", "not-an-id")
    assert "invalid memory id 'not-an-id'" in bad.stderr


def test_memory_of_an_earlier_conversation_is_recalled_after_restart(persyn: Persyn, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "task": "summarize",
                        "output": {
                            "summary": "I met Sam, who told me his dog is called Biscuit.",
                            "tags": ["dogs"],
                        },
                    },
                    {
                        "task": "rate",
                        "output": {
                            "emotional_significance": 6,
                            "decisions": 0,
                            "novelty": 7,
                            "continuing_themes": 0,
                            "explicit_importance": 0,
                            "importance": 7,
                            "sensitivity": "private",
                            "emotion": "engaged",
                        },
                    },
                ]
            }
        )
    )
    env = {
        "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
        "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "0.02",
        "PERSYN_DISPATCH__HOUSEKEEPING_SECONDS": "0.5",
    }
    first = persyn.run("chat", "--as", "Sam", input="My dog is called Biscuit.\n", env=env)
    assert first.returncode == 0, first.stderr
    # A later session: the first conversation has gone idle, closes, and is consolidated
    # by the background queue while this one runs.
    daemon = persyn.start_daemon("run", env=env)
    try:
        import time

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = json.loads(persyn.run("memory", "list", "--json").stdout)
            if listed:
                break
            time.sleep(1)
        else:
            raise AssertionError("the conversation was never consolidated")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert listed[0]["summary"] == "I met Sam, who told me his dog is called Biscuit."
    assert listed[0]["importance"] == 7
    second = persyn.run("chat", "--as", "Sam", input="What is my dog called?\n", env=env)
    assert second.returncode == 0
    # The prompt of the new turn carried the memory with its band.
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        flags = db.execute("SELECT key FROM flags WHERE key LIKE 'recalled:%'").fetchall()
    assert flags, "the memory was surfaced into the new conversation's context"


def test_recall_explain_shows_each_score_part(persyn: Persyn, tmp_path: Path) -> None:
    """`--explain`: the parts whose weighted mean ([memory.weights] defaults) is the score."""
    assert persyn.run("memory", "import", str(_write_history(tmp_path / "history.jsonl"))).returncode == 0
    asked = ("memory", "recall", "violins workshop", "--participant", "Sam", "--now", "2026-02-01T00:00:00")
    [first, *_] = json.loads(persyn.run(*asked, "--explain", "--json").stdout)
    parts = first["explain"]
    assert first["ref"] == "hist:1"
    assert set(parts) == {"similarity", "keyword", "date", "recency", "importance", "participants", "cosine"}
    assert parts["date"] is None  # the query names no date: not counted
    assert parts["participants"] == 1.0 and parts["keyword"] == 1.0
    assert parts["importance"] == pytest.approx(8 / 9, abs=1e-4)  # rated 9 of 10
    assert parts["recency"] == pytest.approx(0.5 ** ((26 + 14 / 24) / 30), abs=1e-3)  # 26 d 14 h old
    assert 0.0 < parts["cosine"] < 1.0 and 0.0 < parts["similarity"] <= 1.0
    weights = {"similarity": 1.0, "keyword": 1.0, "recency": 0.05, "importance": 0.1, "participants": 0.15}
    mean = sum(w * parts[name] for name, w in weights.items()) / sum(weights.values())
    assert first["score"] == pytest.approx(mean, abs=1e-3)

    shown = persyn.run(*asked, "--explain").stdout
    assert "similarity" in shown and "keywords 1.00" in shown and "date -" in shown
    assert "participants 1.00" in shown and "(cosine " in shown
    assert "keywords" not in persyn.run(*asked).stdout  # only when asked
