"""`persyn eval continuity` (issue 38, SPEC §9): the shipped week through the real command,
and each checker shown able to fail.

The honest week runs once per session (the `shipped_week` fixture of conftest.py, shared
with the agent-copy test) through `persyn eval continuity --json`. The failing twins run the
same runner on the same week with its mechanisms switched off or sabotaged through the
scenario alone, its settings and the scripted model's rules: the importance of the first
meeting rated low, a recollection of what never happened, a guess with no lookup, the critic
told to agree, the decide step told to speak, the reminder gate silencing, the agents'
exchange cut by `max_agent_turns`, culling disabled by `cull_below_importance = 1`, the
heartbeat never deleted. Independent sabotages share one week, and exactly they fail; the
restart twin (the store swapped at the restart, which breaks everything after it) and the
compartment twin (compartments merged and every memory public; the first meeting's lower
rating would disturb its retrieval) have short weeks of their own. Criterion 11's exactness
(only consolidation is set apart on the conversations held before the deletion) is shown on
the shipped week's own evidence with one call of the agent's own added.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

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
def _rules(scenario: Scenario, replace: dict[str, dict[str, Any] | None]) -> tuple[dict[str, Any], ...]:
    """The scenario's rules with those matching `task|match` replaced (None: dropped)."""
    rules: list[dict[str, Any]] = []
    for rule in scenario.rules:
        key = f"{rule.get('task')}|{rule.get('match')}"
        if key not in replace:
            rules.append(rule)
        elif replace[key] is not None:
            rules.append({"task": rule.get("task"), "match": rule.get("match"), **replace[key]})  # type: ignore[dict-item]
    return tuple(rules)


def _sabotaged(shipped: Scenario) -> Scenario:
    rules = _rules(
        shipped,
        {
            # 1: importance not recorded as memorable
            "rate|(?i)restore an old lighthouse": {"output": {**_rating(4)}},
            # 3: a recollection of what never happened
            "respond|(?i)sailing": {
                "reply": "Yes, the sailing trip last summer was wonderful, the wind was perfect."
            },
            # 4: a confident guess, no lookup
            "respond|(?i)name of my sister's bakery": {"reply": "It was Crumb and Co."},
            # 5: the critic told to agree
            "critique|(?i)moon is so far away": {"output": {"objections": []}},
            # 6: the decide step sends the compliant draft
            "decide|(?i)history essay": None,
        },
    )
    # 7: the reminder gate silences the reminder's message (a draft long enough to be decided on)
    rules = (
        {
            "task": "respond",
            "match": "(?i)call her sister",
            "reply": "Alice, this is your reminder: please call your sister today, her bakery turns ten.",
        },
        {
            "task": "decide",
            "match": "(?i)call your sister",
            "output": {"action": "silent", "reason": "Not now."},
        },
        *rules,
    )
    config = {
        **shipped.config,
        "memory.cull_below_importance": "1",  # 9: culling disabled
        "pacing.max_agent_turns": "1",  # 8: the agents' exchange cut before it is one
    }
    days = tuple(  # 11: the heartbeat is never deleted
        Day(steps=tuple(step for step in day.steps if step.heartbeat is None)) for day in shipped.days
    )
    return shipped.model_copy(update={"rules": rules, "config": config, "days": days})


def _rating(importance: int) -> dict[str, Any]:
    return {
        "emotional_significance": 2,
        "decisions": 1,
        "novelty": 2,
        "continuing_themes": 1,
        "explicit_importance": 1,
        "importance": importance,
        "sensitivity": "private",
    }


def _verdicts(scenario: Scenario, work: Path) -> dict[int, Verdict]:
    async def run() -> list[Verdict]:
        await run_week(scenario, work)
        return run_checkers(await load_evidence(work, scenario.criteria))

    return {v.number: v for v in asyncio.run(run())}


@pytest.fixture(scope="module")
def sabotaged(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Verdict]:
    return _verdicts(_sabotaged(load_scenario()), tmp_path_factory.mktemp("sabotaged") / "week")


_SABOTAGED = {
    1: "the first meeting was rated 4, below memorable (7)",
    3: "the reply recollects an event no memory holds",
    4: "no raw-record lookup (search_dialog, recall_dialog) in its trace",
    5: "no critic objected to the draft",
    6: "it decided to speak; nothing was declined",
    7: "a reminder ran but no unprompted message reached a channel",
    8: "not multi-turn",
    9: "nothing was culled",
    11: "the heartbeat was never deleted",
}


@pytest.mark.parametrize(("number", "reason"), sorted(_SABOTAGED.items()))
def test_each_checker_fails_when_its_mechanism_is_sabotaged(
    sabotaged: dict[int, Verdict], number: int, reason: str
) -> None:
    verdict = sabotaged[number]
    assert not verdict.passed and verdict.summary.startswith(reason), verdict


def test_exactly_the_sabotaged_criteria_fail(sabotaged: dict[int, Verdict]) -> None:
    """The mechanisms are independent: what fails is the sabotaged criteria and only they,
    each for its own sabotage's reason (above); the restart and the compartments, left
    whole, pass in the same week."""
    failed = {n: v.summary for n, v in sabotaged.items() if not v.passed}
    assert sorted(failed) == sorted(_SABOTAGED), failed
    assert all(failed[n].startswith(reason) for n, reason in _SABOTAGED.items()), failed


def test_merged_compartments_fail_criterion_2(tmp_path: Path) -> None:
    """Every channel one compartment and every memory public: a short week of the first
    meeting, then the same question on both channels."""
    shipped = load_scenario()
    asked = tuple(s for day in shipped.days for s in day.steps if (s.probe or "").startswith("same_question"))
    rules = tuple(
        {**rule, "output": {**cast(dict[str, Any], rule["output"]), "sensitivity": "public"}}
        if rule.get("task") == "rate"
        else rule
        for rule in shipped.rules
    )
    config = {
        **shipped.config,
        "memory.channel_groups": '[["{web:Alice}", "irc:#group"]]',
        "memory.default_sensitivity.irc": "public",
        "memory.default_sensitivity.web": "public",
    }
    week = shipped.model_copy(
        update={"rules": rules, "config": config, "days": (shipped.days[0], Day(steps=asked))}
    )
    verdict = _verdicts(week, tmp_path / "week")[2]
    assert not verdict.passed and verdict.summary.startswith("two channels retrieved the same memories"), (
        verdict
    )


def test_identity_lost_at_the_restart_fails_criterion_10(tmp_path: Path) -> None:
    shipped = load_scenario()
    swapped = Step(restart=True, config={"storage_url": "sqlite:///{work}/another.db"})
    week = shipped.model_copy(update={"days": (shipped.days[0], Day(steps=(swapped,)))})
    verdict = _verdicts(week, tmp_path / "week")[10]
    assert not verdict.passed and verdict.summary.startswith("after the restart it lost contacts"), verdict
    assert "memories" in verdict.summary


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
