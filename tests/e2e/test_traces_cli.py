"""`persyn traces list | show` read the local span store with no collector (SPEC App. D)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.testing import run_runtime

pytestmark = pytest.mark.e2e

_CONFIG = (
    # No emotion reading: it is background work that joins the turn's trace whenever it runs,
    # so the turn's call count would depend on whether it ran before the runtime stopped.
    '[deliberation]\nenabled = false\n[emotion]\nenabled = false\n[tracing]\nenabled = true\ncontent = "full"\nexporters = ["local"]\n'
)


async def test_traces_list_and_show_a_turn_from_the_local_store(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with run_runtime(home, config=_CONFIG) as pilot:
        first, _ = await pilot.say("Hello there, Ada")
        second, _ = await pilot.say("What is new?", channel="porch")
    cli = Persyn(home)

    listed = cli.run("--now", "2026-11-30T10:00:00+00:00", "traces", "list", "--since", "3650d", "--json")
    assert listed.returncode == 0, listed.stderr
    summaries = json.loads(listed.stdout)
    assert [s["event_id"] for s in summaries] == [first.id, second.id]
    assert all(s["kind"] == "message" and s["surface"] == "test" for s in summaries)
    assert [(s["model_calls"], s["tool_calls"], s["outcome"]) for s in summaries] == [(2, 0, "speak")] * 2
    assert summaries[0]["input_tokens"] > 0

    shown = cli.run("traces", "show", first.id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("activation message") and "ms" in lines[0] and "ended=speak" in lines[0]
    assert any(line.startswith("  model respond") and "model=test:echo" in line for line in lines)
    assert any(line.startswith("  model decide") for line in lines)
    assert any("input: Hello there, Ada" in line for line in lines)

    as_json = cli.run("traces", "show", first.id.lower(), "--json")
    spans = json.loads(as_json.stdout)
    assert [span["name"] for span in spans] == ["activation message", "model respond", "model decide"]
    assert spans[1]["parent_id"] == spans[0]["span_id"] and spans[0]["parent_id"] is None

    table = cli.run("traces", "list", "--since", "3650d")
    assert table.returncode == 0 and first.id in table.stdout and second.id in table.stdout


def test_traces_show_names_a_bad_or_unknown_id(tmp_path: Path) -> None:
    cli = Persyn(tmp_path / "home")
    assert cli.run("init", "--name", "Ada").returncode == 0
    bad = cli.run("traces", "show", "not-an-id")
    assert bad.returncode == 2 and "'not-an-id' is neither an event id" in bad.stderr
    unknown = cli.run("traces", "show", "01KB3S4Z7XQ5M0R2V8T6N9P1AB")
    assert unknown.returncode == 2 and "no trace of" in unknown.stderr and "Tracing is off" in unknown.stderr
    empty = cli.run("traces", "list")
    assert empty.returncode == 0 and "No traces recorded" in empty.stdout
