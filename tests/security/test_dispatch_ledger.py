"""A model call made twice is billed twice, so the ledger shows two (issue 13, item 2).

A durable step run again (a crash, or another process recovering it) calls its model again.
Its usage record id used to be derived from the step and the round only, so the second bill
got the first one's id and the ledger counted one line. Each physical call now has its own
record id; the logical call id they share is how `persyn usage` reports the repeat.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Task, load_settings
from persyn.core.ids import new_id
from persyn.gateway.base import Prompt, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.usage.context import Attribution, bind, rebind
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.ledger import read_records, render_summary, summarize
from persyn.usage.meter import Meter

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="hello", name="Sam"),))


async def test_a_step_run_twice_is_two_ledger_entries_and_reported_as_repeated(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "persyn.toml").write_text('[models]\ndefault = "test:instant"\n')
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id(START))
    clock = ManualClock(START)
    meter = Meter([JsonlAdapter(settings.usage_log_path)])
    gateway = ModelGateway(settings, agent, meter, clock=clock)
    workflow = new_id(START)

    async def respond_step() -> str | None:
        # What `workflows.respond_step` binds around the respond call of one activation.
        with bind(Attribution(agent_id=agent.id, thread_id=workflow)), rebind(step_key=f"{workflow}:1"):
            return (await gateway.complete(Task.RESPOND, PROMPT)).usage_id

    first = await respond_step()
    clock.advance(timedelta(seconds=3))
    second = await respond_step()  # the same step again: a second process recovered it
    await gateway.aclose()
    meter.close()

    records = [r for r in read_records(settings.usage_log_path) if r is not None]
    assert [r.id for r in records] == [first, second]
    assert first != second
    assert records[0].call_id is not None and records[0].call_id == records[1].call_id
    report = summarize(settings.usage_log_path, by="stage")
    assert [(row.key, row.calls, row.input_tokens, row.output_tokens) for row in report.rows] == [
        ("respond", 2, 2, 2)
    ]
    assert (report.records, report.duplicates, report.repeated_calls) == (2, 0, 1)
    assert render_summary(report).splitlines()[-2:] == [
        "1 call(s) made again by a re-run step (after a crash or a recovery): billed, so counted",
        "2 call(s) unpriced: add them to [prices] to cost them",
    ]
