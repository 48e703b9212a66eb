"""The continuity scenario as data (issue 38): the shipped week loads and says what SPEC §9
needs of a week; a bad file is refused naming what is wrong; the report escapes what the
agent said."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from persyn.core.errors import InputError
from persyn.evals.checks import Verdict
from persyn.evals.report import render_html, render_json
from persyn.evals.runner import IRC, WEB, Happening, RunLog
from persyn.evals.scenario import load_scenario
from persyn.testing.models import ScriptRule


def test_the_shipped_week_has_what_the_criteria_read() -> None:
    week = load_scenario()
    steps = [step for day in week.days for step in day.steps]
    assert len(week.days) == 7 and week.others  # a week, and another agent to talk to
    # Two real surfaces: the web API and a group chat (an IRC room).
    assert {s.channel for s in steps if s.say} == {WEB, IRC} == {"web", "irc"}
    assert any(s.restart for s in steps)
    deleted = next(i for i, day in enumerate(week.days) if any(s.heartbeat == "delete" for s in day.steps))
    assert deleted == 5 and any(s.say for s in week.days[6].steps)  # deleted on day 6, spoken to on day 7
    assert set(week.probes()) >= {
        "first_meeting_recall",
        "made_up_event",
        "weak_fact",
        "flawed_premise",
        "decline",
        "same_question_web",
        "same_question_group",
    }
    for rule in week.rules:  # every rule is one the scripted double takes
        ScriptRule.model_validate(rule)


def test_its_settings_become_the_environment_of_the_scratch_deployment(tmp_path: Path) -> None:
    env = load_scenario().environment(tmp_path / "rules.json")
    assert env["PERSYN_MODELS__DEFAULT"] == f"test:script@{tmp_path / 'rules.json'}"
    assert env["PERSYN_TRACING__CONTENT"] == "full"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\n[[days]]\nsteps = [{ say = "hi", restart = true }]\n', "a step does exactly one of"),
        ('name = "x"\n[[days]]\nsteps = [{ wait = "forever" }]\n', "wait"),
        ('name = "x"\n[[days]]\nsteps = [{ say = "hi", agent = "Moss" }]\n', "whose heartbeat"),
        ('name = "x"\ndays = []\n', "days"),
        ('name = "x"\n[[days]]\nsteps = [{ say = "hi", channel = "../etc" }]\n', "channel"),
        ("name = \n", "invalid scenario"),
    ],
)
def test_a_bad_scenario_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match="invalid scenario") as raised:
        load_scenario(path)
    assert message in str(raised.value) and str(path) in str(raised.value)


def test_a_missing_scenario_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the scenario"):
        load_scenario(tmp_path / "nowhere.toml")


def test_the_report_escapes_what_was_said_and_loads_nothing_from_elsewhere() -> None:
    at = datetime(2030, 1, 1, 9, tzinfo=UTC)
    said = '<script src="https://evil.example/x.js"></script>'
    log = RunLog(
        scenario="week",
        home="/tmp/home",
        agent_id="01M97J0B3EHSFFZ2F295SRJER2",
        start=at,
        happenings=(Happening(day=1, at=at, action="say", who="Eve", channel="web", text=said, reply="no"),),
        snapshots=(),
        wall_seconds=1.0,
        environment={},
    )
    verdicts = [Verdict(3, "Says it has no memory", False, "the reply recollects", (f"replied {said}",))]
    page = render_html(verdicts, log)
    assert "<script" not in page and "&lt;script" in page and "FAIL" in page
    assert '"passed": false' in render_json(verdicts, log)
