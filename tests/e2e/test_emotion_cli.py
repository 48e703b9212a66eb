"""`persyn memory show` prints the emotional state kept with a memory (SPEC §4.9)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.config.template import render_agent
from persyn.testing import run_runtime
from persyn.testing.models import DoubleReply, minimal_instance, output_schema, registered_double

pytestmark = pytest.mark.e2e


def _content(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
    if task == "classify" and "say how you feel now" in (info.instructions or ""):
        return {"satisfied": 0.5, "amused": 0.25, "calm": 0.25}
    if task == "summarize":
        return {"summary": "I told Sam a joke and we both laughed.", "tags": ["jokes"]}
    schema = output_schema(info)
    return (
        DoubleReply(output=minimal_instance(schema))
        if schema is not None
        else DoubleReply(text="Ha, good one.")
    )


async def test_memory_show_prints_the_distribution_strongest_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with registered_double("content", _content):
        async with run_runtime(home, model="test:content") as pilot:  # on by default
            await pilot.say("Tell me a joke about sailors, please", transmitted=True)
            await pilot.settle()
            await pilot.close_idle(after=timedelta(hours=2))
            (record,) = await pilot.full_store.list_records(pilot.agent.id)
            agent = pilot.agent
    config = home / "persyn.toml"  # the harness gives its agent in code: the CLI needs it written
    config.write_text(config.read_text() + "\n" + render_agent(agent))
    cli = Persyn(home)
    shown = cli.run("memory", "show", record.id)
    assert shown.returncode == 0, shown.stderr
    assert "emotion: satisfied" in shown.stdout
    assert "emotions: satisfied 50%, amused 25%, calm 25%, anxious 0%" in shown.stdout
    as_json = json.loads(cli.run("memory", "show", record.id, "--json").stdout)
    assert as_json["record"]["emotion"] == "satisfied"
    assert as_json["emotions"]["satisfied"] == 0.5 and len(as_json["emotions"]) == 9
