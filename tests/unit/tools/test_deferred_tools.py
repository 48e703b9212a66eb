"""What the tool definitions cost, and what is kept: compacted schemas still validate in full,
and deferred tools (`[tools] deferred`) are listed in `call_tool`, described on request and run
through it under the same checks and loop breakers."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config import ToolsConfig
from persyn.gateway.base import ToolCall
from persyn.tools import Tool, ToolRegistry, ToolStatus
from persyn.tools.registry import CALL_TOOL, compact_schema


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=20, description="The note.")
    tag: str | None = Field(default=None, description="A tag.")


class NoteOut(BaseModel):
    noted: str


async def _note(args: NoteIn) -> NoteOut:
    return NoteOut(noted=f"{args.text} #{args.tag}" if args.tag else args.text)


def _registry(deferred: list[str]) -> ToolRegistry:
    tools = [
        Tool(
            name=name,
            description=f"Keep a {name.replace('_', ' ')}. It is kept forever: mind what you keep.",
            input_model=NoteIn,
            output_model=NoteOut,
            handler=_note,
        )
        for name in ("take_note", "archive_note", "remote__fetch")
    ]
    return ToolRegistry(tools, config=ToolsConfig.model_validate({"deferred": deferred}, strict=False))


def test_a_compacted_schema_keeps_what_the_model_needs() -> None:
    schema = compact_schema(NoteIn.model_json_schema())
    assert schema == {
        "properties": {
            "text": {"description": "The note.", "type": "string"},
            "tag": {"description": "A tag.", "type": "string"},
        },
        "required": ["text"],
        "type": "object",
    }


async def test_a_compacted_bound_is_still_enforced() -> None:
    outcome = await _registry([]).call(ToolCall(id="1", name="take_note", args={"text": "x" * 21}))
    assert outcome.status is ToolStatus.INVALID_ARGUMENTS and "at most 20 characters" in outcome.content


def test_deferred_tools_are_listed_in_call_tool_only() -> None:
    registry = _registry(["archive_note", "*__*"])
    names = [spec.name for spec in registry.specs()]
    assert names == [CALL_TOOL, "take_note"]
    listing = registry.specs()[0].description
    assert "- archive_note: Keep a archive note\n- remote__fetch: Keep a remote fetch" in listing
    assert "mind what you keep" not in listing  # the summary only
    assert [d.name for d in registry.tool_definitions()] == names
    assert [spec.name for spec in _registry([]).specs()] == ["archive_note", "remote__fetch", "take_note"]


async def test_call_tool_describes_then_runs_a_deferred_tool() -> None:
    registry = _registry(["archive_note"])
    described = await registry.call(ToolCall(id="1", name=CALL_TOOL, args={"name": "archive_note"}))
    assert described.ok
    definition = json.loads(described.content)
    assert definition["description"].endswith("mind what you keep.")
    assert definition["arguments"]["required"] == ["text"]
    ran = await registry.call(
        ToolCall(
            id="2", name=CALL_TOOL, args={"name": "archive_note", "arguments": {"text": "hi", "tag": "t"}}
        )
    )
    assert ran.ok and ran.name == CALL_TOOL and ran.call_id == "2"
    assert json.loads(ran.content) == {"noted": "hi #t"}
    bad = await registry.call(
        ToolCall(id="3", name=CALL_TOOL, args={"name": "archive_note", "arguments": {"text": 5}})
    )
    assert bad.status is ToolStatus.INVALID_ARGUMENTS and "'archive_note'" in bad.content


async def test_call_tool_runs_only_deferred_tools() -> None:
    registry = _registry(["archive_note"])
    for name in ("take_note", "no_such_tool", CALL_TOOL):
        outcome = await registry.call(ToolCall(id="1", name=CALL_TOOL, args={"name": name, "arguments": {}}))
        assert outcome.status is ToolStatus.UNKNOWN_TOOL, name
        assert "archive_note" in outcome.content
    without = await _registry([]).call(ToolCall(id="1", name=CALL_TOOL, args={"name": "take_note"}))
    assert without.status is ToolStatus.UNKNOWN_TOOL  # nothing deferred: no call_tool at all


async def test_the_loop_breakers_count_calls_through_call_tool() -> None:
    registry = _registry(["archive_note"])
    breaker = registry.breaker()
    args = {"name": "archive_note", "arguments": {"text": "again"}}
    outcomes = [
        await registry.call(ToolCall(id=str(n), name=CALL_TOOL, args=args), breaker) for n in range(4)
    ]
    assert [o.status for o in outcomes][:2] == [ToolStatus.OK, ToolStatus.OK]
    assert outcomes[-1].status is ToolStatus.BREAKER_TRIPPED
