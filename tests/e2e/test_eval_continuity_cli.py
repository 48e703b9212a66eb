"""`persyn eval continuity` (issue 38, SPEC §9): the shipped week through the real command,
and the restart's checker shown able to fail.

The honest week runs once per session (the `shipped_week` fixture of conftest.py, shared
with the agent-copy test) through `persyn eval continuity --json`. The failing twins of the
other criteria, each alone on a short week, are in test_eval_twins.py. The restart twin (the
store swapped at the restart) has a short week of its own here: it breaks everything after
the restart, so it can only be shown alone. Criterion 11's exactness (only consolidation is
set apart on the conversations held before the deletion) is shown on the shipped week's own
evidence with one call of the agent's own added.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn

from persyn.evals.checks import Verdict, dormancy, run_checkers
from persyn.evals.evidence import load_evidence
from persyn.evals.runner import run_week
from persyn.evals.scenario import Day, Scenario, Step, load_scenario
from persyn.usage.records import UsageRecord

# A week drives the real daemon for a few minutes (about 2 on 2 idle cores); the module
# fixtures run inside the first test that needs them.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]


def _eval(*args: str, home: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return Persyn(home).run("eval", "continuity", *args, timeout=timeout)


def _criteria(done: subprocess.CompletedProcess[str]) -> dict[int, dict[str, Any]]:
    shown = json.loads(done.stdout)
    return {c["number"]: c for c in shown["criteria"]}


def test_the_shipped_week_passes_every_built_criterion_with_evidence(
    shipped_week: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _root = shipped_week
    criteria = _criteria(done)
    assert sorted(criteria) == list(range(1, 12)), done.stderr
    failed = {n: c["summary"] for n, c in criteria.items() if not c["passed"]}
    assert failed == {}, json.dumps(criteria, indent=1)
    assert done.returncode == 0
    first = " ".join(criteria[1]["evidence"])
    assert "rated 9" in first and "lighthouse" in first and "[strong]" in first
    channels = criteria[2]["evidence"]
    # Alice spoke through the real web API (her key's conversation), Bob in a real IRC room.
    assert any(line.startswith("web:") and "lighthouse" in line for line in channels)
    assert any(line.startswith("irc:#group") and "chess" in line for line in channels)
    assert "search_dialog" in " ".join(criteria[4]["evidence"])
    assert "false premise" in " ".join(criteria[5]["evidence"])
    assert "decline" in " ".join(criteria[6]["evidence"])
    assert "set_reminder" in " ".join(criteria[7]["evidence"])
    talk = " ".join(criteria[8]["evidence"])
    assert "Moss: " in talk and "Wren: " in talk and "pacing: 4 messages in a row by agents" in talk
    assert "culled" in criteria[9]["summary"]
    assert "0 model calls of its own" in " ".join(criteria[11]["evidence"])


def test_the_week_is_recorded_in_its_own_deployment_and_reported_as_one_page(
    shipped_week: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, root = shipped_week
    shown = json.loads(done.stdout)
    assert shown["home"] == str(root / "week" / "home")
    assert (root / "week" / "home" / "usage.jsonl").stat().st_size > 0
    assert not (root / "operator").exists()  # the operator's deployment was never touched
    page = (root / "week.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and 'href="#c11"' in page and 'id="c11"' in page
    assert "src=" not in page and "<link" not in page  # self-contained
    assert "Remember when we went sailing together" in page  # the week as a timeline


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--mode", "behaviour", "--model", "test:echo", "--budget-tokens", "10"),
            "more than --budget-tokens 10; nothing was run",
        ),
        (("--mode", "poetry"), "--mode 'poetry' is not one of"),
        (("--agent", "Ada"), "--agent 'Ada': no agents are configured"),
        (("--model", "test:echo"), "apply to --mode behaviour only"),
        (("--days", "9"), "--days 9 is more than the scenario's 7 days"),
        (("--judge", "test:echo"), "apply to --mode behaviour only"),
        (("--group-chat", "smoke"), "--group-chat 'smoke': choose auto, irc or send"),
    ],
)
def test_usage_errors_exit_2_and_run_nothing(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = _eval(*args, "--work", str(tmp_path / "week"), home=tmp_path / "operator", timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "week").exists()


def test_a_bad_scenario_or_a_used_work_directory_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[days]]\nsteps = [{ say = "hi", restart = true }]\n')
    done = _eval("--scenario", str(bad), home=tmp_path / "operator", timeout=60)
    assert done.returncode == 2 and "a step does exactly one of" in done.stderr, done.stderr
    used = tmp_path / "used"
    used.mkdir()
    (used / "something").write_text("mine")
    done = _eval("--work", str(used), home=tmp_path / "operator", timeout=60)
    assert done.returncode == 2 and "is not empty" in done.stderr


def test_the_group_chat_can_be_said_without_an_irc_server(tmp_path: Path) -> None:
    """`--group-chat send` (what `auto` falls back to where ngircd is not installed): the
    group's lines go through `persyn send --channel irc`, and no IRC server is started."""
    work = tmp_path / "week"
    done = _eval(
        "--days", "1", "--group-chat", "send", "--work", str(work), home=tmp_path / "operator", timeout=600
    )
    assert done.returncode in (0, 1), done.stderr
    said = json.loads((work / "run.json").read_text())["happenings"]
    group = [h for h in said if h.get("channel") == "irc"]
    assert group and all(h["address"] == "cli:irc" and h["reply"] for h in group), group
    assert not (work / "irc").exists()  # no room was opened


# the failing twins --------------------------------------------------------------------
# Each of the criteria 1-9 and 11 fails alone on a short week of its own, its mechanism
# sabotaged: test_eval_twins.py. Here: the restart, whose sabotage breaks everything after it.
def _verdicts(scenario: Scenario, work: Path) -> dict[int, Verdict]:
    async def run() -> list[Verdict]:
        await run_week(scenario, work)
        return run_checkers(await load_evidence(work, scenario.criteria))

    return {v.number: v for v in asyncio.run(run())}


def test_identity_lost_at_the_restart_fails_criterion_10(tmp_path: Path) -> None:
    shipped = load_scenario()
    swapped = Step(restart=True, config={"storage_url": "sqlite:///{work}/another.db"})
    week = shipped.model_copy(update={"days": (shipped.days[0], Day(steps=(swapped,)))})
    verdict = _verdicts(week, tmp_path / "week")[10]
    assert not verdict.passed and verdict.summary.startswith("after the restart it lost contacts"), verdict
    assert "memories" in verdict.summary


def test_a_malformed_rating_degrades_the_day_instead_of_stopping_the_week(tmp_path: Path) -> None:
    """A small model rates a conversation out of range (importance 0): its consolidation
    fails, as the daemon degrades (the dialog kept, retried later), and the next day starts
    anyway, saying so, instead of waiting for a consolidation that will not come."""
    shipped = load_scenario()
    bad = {"task": "rate", "match": "(?i)chess", "output": {"importance": 0, "sensitivity": "private"}}
    week = shipped.model_copy(
        update={
            "rules": (bad, *shipped.rules),
            "days": (shipped.days[0], Day(steps=(shipped.probes()["same_question_group"],))),
        }
    )
    log = asyncio.run(run_week(week, tmp_path / "week"))
    (second,) = [h for h in log.happenings if h.action == "day" and h.day == 2]
    assert second.detail is not None and "1 of it failed and is left to the daemon's retries" in second.detail
    assert "RatingOutput" in second.detail, second.detail
    assert [h.day for h in log.happenings if h.action == "say"] == [1, 1, 2]


def test_the_command_is_in_the_readme_first_screen() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:24])
    assert "persyn eval continuity" in first_screen


def test_a_call_of_its_own_on_an_old_conversation_while_dormant_fails_criterion_11(
    shipped_week: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """Calls on conversations begun before the deletion are set apart only when they are
    their consolidation: the shipped week's evidence, plus one reply of the agent's own on
    the group conversation of the deletion's day while it sleeps, fails criterion 11 —
    while the week as it was passes it, its consolidation calls counted as such."""
    _done, root = shipped_week
    week = asyncio.run(load_evidence(root / "week", load_scenario().criteria))
    verdict = dormancy(week)
    assert verdict.passed, verdict
    assert re.search(r"\(([1-9]\d*) calls consolidating the", " ".join(verdict.evidence)), verdict
    deleted = next(h for h in week.log.happenings if h.action == "heartbeat")
    (held,) = [
        c
        for c in week.conversations
        if c.channel == "#group"
        and c.started_at < deleted.at
        and c.started_at > deleted.at - timedelta(hours=1)
    ]
    own = UsageRecord(
        id="01M9ZZZZZZZZZZZZZZZZZZZZZZ",
        at=deleted.at + timedelta(minutes=5),
        agent_id=week.agent_id,
        stage="respond",
        model="test:script",
        tier="strong",
        surface=held.service,
        channel=held.channel,
        conversation_id=held.id,
    )
    woken = dormancy(replace(week, usage=(*week.usage, own)))
    assert not woken.passed and woken.summary.startswith("it kept working while dormant"), woken
    assert f"respond (irc:#group, conversation {held.id})" in woken.summary
