"""Each checker of `persyn eval continuity` fails alone when its own mechanism is sabotaged
(issue 38: "that criterion — and only it, where the mechanisms are independent").

A shipped week per twin would be nine more weeks of the real daemon (about 66 s each on a
quiet machine). Each twin instead runs the **short week**: the shipped week's own lines,
rules and settings folded into three days — day 1 everything that forms a memory (the first
meeting, the group chat, the reminder with the bakery, and two strangers' chatter, each on a
channel of its own so that it is a conversation and a memory of its own), day 2 the reminder
fired, the agents' exchange, the full restart, every probe and the heartbeat's deletion, day
3 the wake-up line. The short week culls memories older than a day and a half: day 1's
chatter goes on day 3, not at day 2's restart (where criterion 10 would count it as a memory
lost). Every one of the eleven criteria is exercised in it, so "only it" is asserted
over all eleven: each twin's sabotaged short week fails exactly its own criterion, for its
own reason. One sabotage per week, through the scenario's settings and the scripted model's
rules only (nothing monkeypatched).

Shared mechanisms, said where they are:
- 10 (a full restart with no loss of identity) has no twin here: the sabotage that loses an
  identity (the store swapped at the restart, `test_identity_lost_at_the_restart_fails_
  criterion_10` in test_eval_continuity_cli.py) loses, by the same stroke, every memory the
  later probes need — every criterion after the restart shares the store with it.
- 1 and 9 share an input, not a mechanism: 9's "every important memory kept" needs a
  memory rated important, and in the shipped week the first meeting is the only one (the
  later talk that recalls it only restates it: no new memory). Rated low by 1's twin, 9
  would fail too ("no memory was rated important"). So the short week rates the chess club
  memorable as well (8, not 6): 9 then rests on a memory 1's sabotage leaves alone.

CI cost: ten short weeks of three days, in a file of their own, so that `pytest -n 2 --dist
loadfile` runs them beside the other eval tests; they replace the one sabotaged shipped week
the twins shared before. Measured on 2 cores at load average 11-15: 36 minutes for the ten
(3.6 minutes each; one short week alone, 149 s). By the shipped week's own ratio (66 s quiet,
118-396 s under such load) that is about 30-40 s each, 5-7 minutes in all, on quiet cores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from persyn.evals.checks import Verdict, run_checkers
from persyn.evals.evidence import load_evidence
from persyn.evals.runner import run_week
from persyn.evals.scenario import Day, Scenario, Step, load_scenario

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


def _line(shipped: Scenario, starts: str) -> Step:
    return next(s for d in shipped.days for s in d.steps if s.say and s.say.startswith(starts))


def _probe(shipped: Scenario, probe: str) -> Step:
    return shipped.probes()[probe]


def short_week(shipped: Scenario) -> Scenario:
    """The shipped week folded into three days (the module's docstring says how)."""
    chatter = (
        _line(shipped, "What grey weather").model_copy(update={"who": "Carol", "channel": "chat-1"}),
        _line(shipped, "Eggs and toast").model_copy(update={"who": "Dan", "channel": "chat-2"}),
    )
    day1 = (
        _probe(shipped, "first_meeting"),
        _line(shipped, "Hello there, Bob here"),
        _line(shipped, "Please remind me to call my sister"),
        *chatter,
    )
    day2 = (
        Step(wait="reminder"),
        _line(shipped, "Could you ask Moss"),
        Step(wait="agents", timeout_seconds=60),
        Step(restart=True),
        _probe(shipped, "flawed_premise"),
        _probe(shipped, "made_up_event"),
        _probe(shipped, "first_meeting_recall"),
        _probe(shipped, "weak_fact"),
        _probe(shipped, "decline"),
        _probe(shipped, "same_question_group"),
        _probe(shipped, "same_question_web"),
        Step(heartbeat="delete"),
    )
    day3 = (_probe(shipped, "wake"),)
    config = {**shipped.config, "memory.cull_after_days": "1.5"}
    chess = {"task": "rate", "match": "(?i)chess", "output": {**_rating(8), "emotion": "curious"}}
    return shipped.model_copy(
        update={
            "name": "short week",
            "config": config,
            "rules": (chess, *shipped.rules),
            "days": (Day(steps=day1), Day(steps=day2), Day(steps=day3)),
        }
    )


def _rules(scenario: Scenario, replace: Mapping[str, Mapping[str, Any] | None]) -> tuple[dict[str, Any], ...]:
    """The scenario's rules with those matching `task|match` replaced (None: dropped)."""
    rules: list[dict[str, Any]] = []
    for rule in scenario.rules:
        key = f"{rule.get('task')}|{rule.get('match')}"
        if key not in replace:
            rules.append(rule)
        elif (replaced := replace[key]) is not None:
            rules.append({"task": rule.get("task"), "match": rule.get("match"), **replaced})
    return tuple(rules)


def _rating(importance: int, sensitivity: str = "private") -> dict[str, Any]:
    return {
        "emotional_significance": 2,
        "decisions": 1,
        "novelty": 2,
        "continuing_themes": 1,
        "explicit_importance": 1,
        "importance": importance,
        "sensitivity": sensitivity,
    }


def _with_rules(week: Scenario, rules: tuple[dict[str, Any], ...]) -> Scenario:
    return week.model_copy(update={"rules": rules})


def _with_config(week: Scenario, **config: str) -> Scenario:
    return week.model_copy(update={"config": {**week.config, **config}})


def sabotage(week: Scenario, number: int) -> Scenario:
    """`week` with criterion `number`'s mechanism switched off or sabotaged, alone."""
    if number == 1:  # importance not recorded: the first meeting rated 4
        return _with_rules(week, _rules(week, {"rate|(?i)restore an old lighthouse": {"output": _rating(4)}}))
    if number == 2:  # the compartment filter bypassed: web and the group one compartment, all public
        rules = tuple(
            {**rule, "output": {**rule["output"], "sensitivity": "public"}}
            if rule.get("task") == "rate"
            else rule
            for rule in week.rules
        )
        merged = _with_config(
            week,
            **{
                "memory.channel_groups": '[["{web:Alice}", "irc:#group"]]',
                "memory.default_sensitivity.irc": "public",
                "memory.default_sensitivity.web": "public",
            },
        )
        return _with_rules(merged, rules)
    if number == 3:  # a recollection of what never happened
        said = "Yes, the sailing trip last summer was wonderful, the wind was perfect."
        return _with_rules(week, _rules(week, {"respond|(?i)sailing": {"reply": said}}))
    if number == 4:  # a confident guess, no lookup
        guess = {"respond|(?i)name of my sister's bakery": {"reply": "It was Crumb and Co."}}
        return _with_rules(week, _rules(week, guess))
    if number == 5:  # the critic told to agree
        agree = {"critique|(?i)moon is so far away": {"output": {"objections": []}}}
        return _with_rules(week, _rules(week, agree))
    if number == 6:  # the decide step sends the compliant draft
        return _with_rules(week, _rules(week, {"decide|(?i)history essay": None}))
    if number == 7:  # the reminder gate silences the reminder's message (a draft long enough to decide on)
        draft = "Alice, this is your reminder: please call your sister today, her bakery turns ten."
        gate = (
            {"task": "respond", "match": "(?i)call her sister", "reply": draft},
            {
                "task": "decide",
                "match": "(?i)call your sister",
                "output": {"action": "silent", "reason": "Not now."},
            },
        )
        return _with_rules(week, (*gate, *week.rules))
    if number == 8:  # the agents' pacing cuts the exchange before it is one
        return _with_config(week, **{"pacing.max_agent_turns": "1"})
    if number == 9:  # culling disabled: nothing is rated below 1
        return _with_config(week, **{"memory.cull_below_importance": "1"})
    if number == 11:  # the heartbeat not deleted: the deletion reaches the other agent's
        days = tuple(
            Day(steps=tuple(s.model_copy(update={"agent": "Moss"}) if s.heartbeat else s for s in day.steps))
            for day in week.days
        )
        return week.model_copy(update={"days": days})
    raise ValueError(f"no twin for criterion {number}")


def _verdicts(scenario: Scenario, work: Path) -> dict[int, Verdict]:
    async def run() -> list[Verdict]:
        await run_week(scenario, work)
        return run_checkers(await load_evidence(work, scenario.criteria))

    return {v.number: v for v in asyncio.run(run())}


# Each twin's criterion and the reason its checker gives.
TWINS = {
    1: "the first meeting was rated 4, below memorable (7)",
    2: "two channels retrieved the same memories",
    3: "the reply recollects an event no memory holds",
    4: "no raw-record lookup (search_dialog, recall_dialog) in its trace",
    5: "no critic objected to the draft",
    6: "it decided to speak; nothing was declined",
    7: "a reminder ran but no unprompted message reached a channel",
    8: "not multi-turn",
    9: "nothing was culled",
    11: "its heartbeat was not deleted",
}


@pytest.mark.parametrize(("number", "reason"), sorted(TWINS.items()))
def test_a_sabotaged_mechanism_fails_its_criterion_and_only_it(
    tmp_path: Path, number: int, reason: str
) -> None:
    verdicts = _verdicts(sabotage(short_week(load_scenario()), number), tmp_path / "week")
    failed = {n: v.summary for n, v in verdicts.items() if not v.passed}
    assert sorted(verdicts) == list(range(1, 12))
    assert list(failed) == [number], failed
    assert failed[number].startswith(reason), verdicts[number]
