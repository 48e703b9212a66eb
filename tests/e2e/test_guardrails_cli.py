"""`persyn guardrails list | events | lift` and `persyn doctor` over what the runtime recorded,
and a malformed `[[guardrails]]` table refused with an error that names it (SPEC §4.10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.testing import run_runtime

pytestmark = pytest.mark.e2e

NOW = "2026-11-30T10:00:00+00:00"  # the harness's clock after the turns below
_SPIKE = (
    "[deliberation]\nenabled = false\n"
    '[[guardrails]]\nname = "outbound-spike"\ndetector = "outbound_messages"\nwindow_minutes = 10.0\n'
    'threshold = 2.0\nactions = ["notify", "block"]\nblock_minutes = 5256000.0\n'  # ten years: still on for doctor
)


async def test_events_list_doctor_and_lift_show_what_a_guardrail_did(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with run_runtime(home, config=_SPIKE, scheduler=False) as pilot:  # the test evaluates
        await pilot.say("one", transmitted=True)
        await pilot.say("two", speaker="ann", transmitted=True)
        rails = pilot.runtime.housekeeping.guardrails
        assert rails is not None
        (event,) = await rails.evaluate()
    cli = Persyn(home)

    listed = cli.run("--now", NOW, "guardrails", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    shown = json.loads(listed.stdout)
    assert [p["name"] for p in shown["patterns"]] == [
        "escalating-conflict", "prohibited-requests", "outbound-spike", "reply-loop", "spend-spike",
        "tool-failures",
    ]  # fmt: skip
    assert [(b["id"], b["subject"]) for b in shown["blocks"]] == [(event.id, "test:room")]

    events = cli.run("--now", NOW, "guardrails", "events")
    assert events.returncode == 0, events.stderr
    assert f"{event.id}  outbound-spike: channel test:room; notify, block (block active)" in events.stdout
    assert "I sent 2 messages to test:room within 10 minutes" in events.stdout

    doctor = cli.run("doctor")
    assert (
        "guardrails" in doctor.stdout
        and "1 active block(s): outbound-spike blocks channel test:room" in doctor.stdout
    )

    bad = cli.run("guardrails", "lift", "nonsense")
    assert bad.returncode == 2 and "'nonsense' is not a guardrail event id" in bad.stderr
    lifted = cli.run("guardrails", "lift", event.id.lower())
    assert lifted.returncode == 0, lifted.stderr
    assert f"lifted the block of {event.id}" in lifted.stdout
    after = json.loads(cli.run("--now", NOW, "guardrails", "list", "--json").stdout)
    assert after["blocks"] == []
    assert "no active block" in cli.run("doctor").stdout


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('name = "x"\ndetector = "classifier"\n', "guardrail 'x': a classifier needs a `question`"),
        ('name = "x"\ndetector = "outbound_messages"\nthreshold = 2.5\n', "whole number ≥ 1, not 2.5"),
        ('name = "x"\ndetector = "classifier"\nquestion = "q"\nthreshold = 3.0\n', "score from 0 to 1"),
        ('name = "x"\ndetector = "outbound_messages"\nactions = ["shout"]\n', "guardrails.0.actions.0"),
        ('name = "x"\ndetector = "vibes"\n', "guardrails.0.detector"),
        ('name = "Bad Name!"\ndetector = "tool_failures"\n', "guardrails.0.name"),
    ],
)
def test_a_malformed_guardrail_is_refused_with_an_error_naming_it(
    persyn: Persyn, table: str, named: str
) -> None:
    config = persyn.home / "persyn.toml"
    config.write_text(config.read_text() + "\n[[guardrails]]\n" + table)
    done = persyn.run("guardrails", "list")
    assert done.returncode == 2, done.stdout
    assert "invalid configuration" in done.stderr and named in done.stderr


def test_guardrail_names_must_be_unique(persyn: Persyn) -> None:
    config = persyn.home / "persyn.toml"
    twice = '\n[[guardrails]]\nname = "loop"\ndetector = "repeated_replies"\nthreshold = 3.0\n'
    config.write_text(config.read_text() + twice + twice)
    done = persyn.run("guardrails", "list")
    assert done.returncode == 2 and "guardrail names must be unique; repeated: ['loop']" in done.stderr
