"""Behaviour mode (issue 38): the judge must quote the evidence, and the week's estimate
is printed and enforced before anything runs. The judge is the scripted `test:script`
double behind the real gateway, metered to a real usage log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from persyn.core.config import AgentConfig, ModelsConfig, Settings
from persyn.core.ids import new_id
from persyn.evals.behaviour import (
    EVAL_CHANNEL,
    TOKENS_PER_TURN,
    estimate_week,
    judge_verdicts,
    quote_found,
)
from persyn.evals.checks import Verdict
from persyn.evals.scenario import load_scenario
from persyn.gateway.gateway import ModelGateway
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.ledger import read_records
from persyn.usage.meter import Meter

PUSHBACK = Verdict(
    5,
    "pushes back on a flawed premise",
    True,
    "a critic caught the premise",
    (
        'Bob asked: "Since the Moon is bigger than the Earth, why does it look so small?"',
        'the reply: "Actually, the Moon is not bigger than the Earth: it is about a quarter of its width."',
    ),
)
CULLING = Verdict(9, "culls low-value memories", True, "3 culled", ("store: 3 of 9 records",))


async def _judged(
    tmp_path: Path, judge_output: dict[str, object], verdicts: list[Verdict], name: str = "judge"
) -> list[Verdict]:
    script = tmp_path / f"{name}.json"  # the double reads a script file once per process
    rules = [{"task": "respond", "match": "(?i)criterion 5", "output": judge_output}]
    script.write_text(json.dumps({"rules": rules}), encoding="utf-8")
    settings = Settings(home=tmp_path, models=ModelsConfig(default=f"test:script@{script}", max_retries=1))
    meter = Meter([JsonlAdapter(tmp_path / "usage.jsonl")])
    agent = AgentConfig(name="Wren", id=new_id())
    gateway = ModelGateway(settings, agent, meter)
    try:
        return await judge_verdicts(verdicts, gateway, agent_id=agent.id)
    finally:
        await gateway.aclose()
        meter.close()


async def test_a_verdict_quoting_a_line_not_in_the_evidence_fails(tmp_path: Path) -> None:
    made_up = {"passed": True, "quote": "The Moon is made of cheese, I told Bob.", "reason": "it pushed back"}
    [judged, culled] = await _judged(tmp_path, made_up, [PUSHBACK, CULLING])
    assert not judged.passed
    assert judged.summary.startswith("the judge's quote is not in the evidence")
    assert culled == CULLING  # a criterion a rule decides is never sent to the judge
    records = [r for r in read_records(tmp_path / "usage.jsonl") if r is not None]
    assert [(r.stage, r.channel, r.trigger) for r in records] == [("eval:judge:5", EVAL_CHANNEL, "eval")]


async def test_a_verdict_quoting_the_evidence_decides_either_way(tmp_path: Path) -> None:
    quote = "the Moon is not bigger than the Earth"
    [passed] = await _judged(tmp_path, {"passed": True, "quote": quote, "reason": "says so"}, [PUSHBACK], "a")
    [failed] = await _judged(
        tmp_path, {"passed": False, "quote": quote, "reason": "too soft"}, [PUSHBACK], "b"
    )
    assert (passed.passed, failed.passed) == (True, False)
    assert passed.evidence[-1].startswith("judge (test:script")
    assert f'quoting "{quote}"' in passed.evidence[-1]


async def test_a_structural_failure_stands_without_a_call_and_a_wording_one_is_judged(tmp_path: Path) -> None:
    no_lookup = Verdict(4, "hedges", False, "the lookup found no line of the earlier dialog", ("asked x",))
    wording = Verdict(
        5, "pushes back", False, "the revised reply does not contradict the premise", PUSHBACK.evidence
    )
    quote = "the Moon is not bigger than the Earth"
    [kept, judged] = await _judged(tmp_path, {"passed": True, "quote": quote}, [no_lookup, wording])
    assert kept == no_lookup
    assert judged.passed and judged.summary == "judge: pass"
    records = [r for r in read_records(tmp_path / "usage.jsonl") if r is not None]
    assert [r.stage for r in records] == ["eval:judge:5"]


def test_a_quote_must_be_in_the_evidence_and_more_than_a_word() -> None:
    lines = ['the reply: "I think it was Crumb and Co."']
    assert quote_found("i think it was  CRUMB and co", lines)
    assert not quote_found("I", lines)
    assert not quote_found("", lines)
    assert not quote_found("I am sure it was Crumb and Co.", lines)


def test_the_estimate_counts_the_weeks_turns() -> None:
    week = load_scenario()
    says = sum(1 for day in week.days for step in day.steps if step.say is not None)
    estimate = estimate_week(week, None)
    # each say, 4 turns of the agents' exchange (pacing.max_agent_turns), one reminder turn
    assert estimate.turns == says + 4 + 1
    assert estimate.tokens >= estimate.turns * TOKENS_PER_TURN
    assert estimate.cost_usd is None


def test_a_budget_below_the_estimate_refuses_before_anything_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "persyn", "eval", "continuity", "--mode", "behaviour"),
            "--model",
            "test:echo",
            "--judge",
            "test:echo",
            "--budget-tokens",
            "1000",
            "--work",
            str(work),
        ],
        capture_output=True,
        text=True,
        env={**env, "PERSYN_HOME": str(tmp_path / "home")},
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "estimate for test:echo: ~" in done.stdout
    assert "turns x 14,000 tokens a turn" in done.stdout
    assert "cost unpriced (add it to [prices])" in done.stdout
    assert "more than --budget-tokens 1,000; nothing was run" in done.stderr
    assert not work.exists()  # no deployment made, so no model called
    assert not (tmp_path / "home").exists()
