"""Issue 13 item 10: imported conversations stayed open, so the first `persyn run` closed
them all at once (a graph and an observation model call each, the scheduler starved
behind them), then culled the low-rated imported records and re-created them from their
dialog. Imported conversations are now stored closed and consolidated; extraction over
them is opt-in (`--extract`, with an estimate and a budget); culling never resurrects."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.core.clock import ManualClock
from persyn.core.config import load_settings
from persyn.store.capabilities import FullStore, require_capability
from persyn.testing import run_runtime

pytestmark = pytest.mark.e2e

ENV = {"PERSYN_MODELS__DEFAULT": "test:echo", "PERSYN_MEMORY__EMBEDDER": "test:hash"}


def _history(path: Path, count: int, *, importance: int = 2) -> Path:
    lines = [
        {
            "time": f"2024-05-{1 + i % 28:02d}T10:00:00Z",
            "channel": "discord:general",
            "participants": ["Ann"],
            "summary": f"Ann and I talked about her garden, day {i}.",
            "importance": 8 if i % 5 == 0 else importance,
            "ref": f"garden-{i}",
            "dialog": [
                {"speaker": "Ann", "text": f"My tomatoes are growing well this year, day {i:03d}."},
                {"speaker": "Ada", "text": "Lovely, what variety are they?"},
            ],
        }
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _ledger(persyn: Persyn) -> list[dict[str, object]]:
    path = persyn.home / "usage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_starting_the_runtime_makes_no_model_call_for_imported_history(
    persyn: Persyn, tmp_path: Path
) -> None:
    done = persyn.run("memory", "import", str(_history(tmp_path / "h.jsonl", 20)), env=ENV)
    assert done.returncode == 0 and "imported 20" in done.stdout, done.stderr
    settings = load_settings(persyn.home, environ=ENV)
    clock = ManualClock(datetime(2026, 12, 1, tzinfo=UTC))
    async with run_runtime(settings, clock=clock, scheduler=False) as pilot:
        runtime = pilot.runtime
        agent_id = settings.agents[0].id
        # What the scheduler's housekeeping does on the first `persyn run`, and a day later.
        assert await runtime.housekeeping.close_idle_conversations() == 0
        assert await runtime.housekeeping.sweep_unconsolidated(grace=timedelta(0)) == 0
        assert await runtime.housekeeping.cull_memories() == 16  # rated 2 and two years old
        clock.advance(timedelta(days=1))
        assert await runtime.housekeeping.close_idle_conversations() == 0
        assert await runtime.housekeeping.sweep_unconsolidated(grace=timedelta(0)) == 0
        # Even a close hook run by hand does not re-create a culled imported memory.
        [conversation] = [
            c
            for c in await require_capability(runtime.store, FullStore).list_conversations(
                agent_id, limit=100
            )
            if c.channel.endswith("#garden-1")
        ]
        assert conversation.closed_at is not None and conversation.kind == "imported"
        await runtime.jobs.run_conversation_hook(agent_id, conversation.id, "consolidate")
        remaining = await require_capability(runtime.store, FullStore).list_records(agent_id, limit=100)
        assert sorted(r.ref or "" for r in remaining) == sorted(f"garden-{i}" for i in range(0, 20, 5))
        await pilot.settle()
        assert pilot.usage() == []
    assert _ledger(persyn) == []


def test_extract_prints_an_estimate_and_keeps_to_its_budget(persyn: Persyn, tmp_path: Path) -> None:
    path = _history(tmp_path / "h.jsonl", 4, importance=5)
    refused = persyn.run("memory", "import", str(path), "--extract", env=ENV)
    assert refused.returncode != 0 and "--budget" in refused.stderr
    estimate_only = persyn.run("memory", "import", str(path), "--extract", "--budget", "0", env=ENV)
    assert estimate_only.returncode == 0, estimate_only.stderr
    found = re.search(
        r"extraction estimate: 4 conversations, \d+ model calls, about (\d+) tokens", estimate_only.stdout
    )
    assert found, estimate_only.stdout
    assert _ledger(persyn) == []  # an estimate costs nothing
    total = int(found.group(1))
    # Room for one conversation's estimate: the next must fit beside what was spent.
    budget = total // 4
    partial = persyn.run("memory", "import", str(path), "--extract", "--budget", str(budget), env=ENV)
    assert partial.returncode == 0, partial.stderr
    assert "extracted 1 of 4 conversations" in partial.stdout
    assert "stopped: the budget" in partial.stderr
    spent = _ledger(persyn)
    assert spent and sum(int(r["input_tokens"]) + int(r["output_tokens"]) for r in spent) <= budget  # type: ignore[call-overload]
    assert {r["stage"] for r in spent} <= {"graph", "extract", "summarize", "dossier"}
    rest = persyn.run("memory", "import", str(path), "--extract", "--budget", str(total), env=ENV)
    assert rest.returncode == 0 and "extracted 4 of 4 conversations" in rest.stdout, rest.stderr
