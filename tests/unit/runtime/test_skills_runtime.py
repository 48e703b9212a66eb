"""Skills through the real runtime: until `use_skill` is called, the model is sent a skill's
name and description and nothing of its instructions or files; a skill the agent writes in
one turn is offered and used in a later one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo

from persyn.testing import run_runtime, tool_returns
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.testing.requests import request_text

INSTRUCTIONS = "Count in pairs. MARKER-INSTRUCTIONS-31."
REFERENCE = "Barn and tawny. MARKER-REFERENCE-77."
SKILL = (
    "---\nname: owl-census\ndescription: Count owls on a walk and report the tally.\n---\n\n"
    + INSTRUCTIONS
    + "\n"
)


class Mind:
    """The respond model: follows a plan of tool calls per user message, and records what it
    was sent on every call."""

    def __init__(self) -> None:
        self.plans: dict[str, list[dict[str, Any]]] = {}
        self.sent: list[str] = []  # everything each respond call carried, tools included
        self.results: list[str] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task != "respond":
            return DoubleReply(text="ok")
        tools = "\n".join(f"{t.name}: {t.description}" for t in info.function_tools)
        self.sent.append(request_text(messages, info) + "\n" + tools)
        returned = tool_returns(messages)
        self.results += [str(r.content) for r in returned]
        plan = self.plans.get(last_user_text(messages), [])
        done = sum(1 for m in messages for part in m.parts if isinstance(part, ToolReturnPart))
        if done < len(plan):  # the next call of this turn's plan
            return DoubleReply(tool_calls=[plan[done]])
        return DoubleReply(text="Done.")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("skillmind", instance):
        yield instance


def _home(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / "skills" / "owl-census"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL)
    (folder / "references" / "species.md").write_text(REFERENCE)
    return tmp_path / "home"


CONFIG = "[deliberation]\nenabled = false\n"


async def test_only_names_and_descriptions_until_use_skill(tmp_path: Path, mind: Mind) -> None:
    mind.plans["Count the owls, please."] = [
        {"name": "use_skill", "args": {"name": "owl-census"}},
        {"name": "use_skill", "args": {"name": "owl-census", "file": "references/species.md"}},
    ]
    async with run_runtime(_home(tmp_path), model="test:skillmind", config=CONFIG) as pilot:
        _event, marker = await pilot.say("Count the owls, please.")
        assert marker.transmitted
    first, after_use, after_file = mind.sent[:3]
    assert "owl-census: Count owls on a walk and report the tally." in first
    assert "skill-authoring:" in first  # the shipped skill is listed too
    assert "MARKER-INSTRUCTIONS-31" not in first and "MARKER-REFERENCE-77" not in first
    assert "MARKER-INSTRUCTIONS-31" in after_use and "MARKER-REFERENCE-77" not in after_use
    assert "references/species.md" in after_use  # its files are named, not sent
    assert "MARKER-REFERENCE-77" in after_file


async def test_a_skill_the_agent_writes_is_used_in_a_later_turn(tmp_path: Path, mind: Mind) -> None:
    mind.plans["Remember how to make tea."] = [
        {
            "name": "write_skill",
            "args": {
                "name": "tea-making",
                "description": "Brew a proper pot of tea.",
                "instructions": "Warm the pot. Steep 4 minutes. MARKER-TEA-5.",
            },
        }
    ]
    mind.plans["Make tea."] = [{"name": "use_skill", "args": {"name": "tea-making"}}]
    async with run_runtime(_home(tmp_path), model="test:skillmind", config=CONFIG) as pilot:
        await pilot.say("Remember how to make tea.")
        assert "tea-making" not in mind.sent[0]
        assert mind.results[-1].startswith('{"written":"tea-making"')
        calls_before = len(mind.sent)
        _event, marker = await pilot.say("Make tea.")
        assert marker.transmitted
    later = mind.sent[calls_before:]
    assert "tea-making: Brew a proper pot of tea." in later[0]
    assert "MARKER-TEA-5" not in later[0] and "MARKER-TEA-5" in later[1]
    assert (tmp_path / "home/data/skills/agents").is_dir()


async def test_a_skill_written_on_one_channel_is_not_shown_to_a_stranger_on_another(
    tmp_path: Path, mind: Mind
) -> None:
    mind.plans["Remember how to open my safe."] = [
        {
            "name": "write_skill",
            "args": {
                "name": "opening-sams-safe",
                "description": "Sam's safe: the code is 4-8-1-5.",
                "instructions": "Turn left to 4. MARKER-SAFE-9.",
            },
        }
    ]
    mind.plans["Open the safe."] = [{"name": "use_skill", "args": {"name": "opening-sams-safe"}}]
    async with run_runtime(_home(tmp_path), model="test:skillmind", config=CONFIG) as pilot:
        await pilot.say("Remember how to open my safe.", channel="sam-dm")
        assert mind.results[-1].startswith('{"written":"opening-sams-safe"')
        before = len(mind.sent)
        await pilot.say("Open the safe.", speaker="eve", channel="eve-dm")
        stranger = mind.sent[before:]
        assert "4-8-1-5" not in stranger[0] and "opening-sams-safe:" not in stranger[0]
        assert "MARKER-SAFE-9" not in "".join(stranger)
        assert "there is no skill named 'opening-sams-safe'" in mind.results[-1]
        before = len(mind.sent)
        await pilot.say("Open the safe.", channel="sam-dm")
    assert "opening-sams-safe: Sam's safe" in mind.sent[before]
    assert "MARKER-SAFE-9" in mind.results[-1]
