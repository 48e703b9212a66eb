"""The operability commands: help, doctor, usage (issue 2)."""

from __future__ import annotations

import json

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def test_every_command_explains_itself(persyn: Persyn) -> None:
    top = persyn.run("--help")
    assert top.returncode == 0
    for command in ("init", "agents", "chat", "send", "run", "worker", "usage", "doctor", "conversations"):
        assert command in top.stdout
        sub = persyn.run(command, "--help")
        assert sub.returncode == 0, sub.stderr
        assert "Usage:" in sub.stdout
    assert "--agent" in persyn.run("chat", "--help").stdout


def test_doctor_reports_and_says_what_to_fix(persyn: Persyn) -> None:
    healthy = persyn.run("doctor")
    assert healthy.returncode == 0, healthy.stdout
    assert "[ ok ] database" in healthy.stdout
    assert "test double" in healthy.stdout
    broken = persyn.run("doctor", PERSYN_MODELS__RESPOND="openai:llama3@http://127.0.0.1:9/v1")
    assert broken.returncode == 1
    assert "[FAIL] model openai:llama3@http://127.0.0.1:9/v1" in broken.stdout
    assert "fix: start the server at http://127.0.0.1:9/v1" in broken.stdout
    hosted = persyn.run("doctor", PERSYN_MODELS__CRITIQUE="anthropic:claude-sonnet-4-5")
    assert hosted.returncode == 1
    assert "ANTHROPIC_API_KEY" in hosted.stdout


def test_usage_sums_the_ledger_once(persyn: Persyn) -> None:
    assert persyn.run("chat", input="one\ntwo\nthree\n").returncode == 0
    ledger = persyn.home / "usage.jsonl"
    lines = ledger.read_text().splitlines()
    # A consumer that sees a record twice (a re-shipped delivery) still counts it once.
    ledger.write_text("\n".join([*lines, lines[0], "{not json"]) + "\n")
    report = json.loads(persyn.run("usage", "--by", "stage", "--json").stdout)
    rows = {row["key"]: row for row in report["rows"]}
    assert rows["respond"]["calls"] == 3
    text = persyn.run("usage", "--by", "conversation").stdout
    assert "respond" not in text
    assert persyn.run("usage", "--since", "yesterday").returncode == 2
