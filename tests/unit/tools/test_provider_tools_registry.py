"""Provider-executed tools in the registry: offered with the others, never run here."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from persyn.core.errors import ConfigError
from persyn.gateway.base import ToolCall, ToolSpec
from persyn.tools.registry import Tool, ToolRegistry, ToolStatus

SEARCH = ToolSpec(name="web_search", description="Search (provider).", parameters={}, provider=True)


class Query(BaseModel):
    query: str


class Found(BaseModel):
    result: str


async def _local_search(args: Query) -> Found:
    return Found(result=f"local results for {args.query}")


def _registry() -> ToolRegistry:
    local = Tool(
        name="web_search",
        description="Search the web with SearXNG.",
        input_model=Query,
        output_model=Found,
        handler=_local_search,
    )
    registry = ToolRegistry([local])
    registry.add_provider_tools([SEARCH])
    return registry


def test_a_provider_tool_is_offered_beside_a_local_one_of_the_same_name() -> None:
    specs = _registry().specs()
    assert [(s.name, s.provider) for s in specs] == [("web_search", False), ("web_search", True)]
    assert _registry().provider_names == ("web_search",)


async def test_a_call_by_that_name_runs_the_local_tool() -> None:
    outcome = await _registry().call(ToolCall(id="c1", name="web_search", args={"query": "lisbon"}))
    assert outcome.status is ToolStatus.OK
    assert outcome.output == {"result": "local results for lisbon"}


async def test_a_provider_tool_alone_is_never_run_here() -> None:
    registry = ToolRegistry()
    registry.add_provider_tools([SEARCH.model_copy(update={"name": "web_fetch"})])
    outcome = await registry.call(ToolCall(id="c1", name="web_fetch", args={"url": "https://example.org"}))
    assert outcome.status is ToolStatus.UNKNOWN_TOOL
    assert "run by the model provider" in outcome.content


def test_only_provider_specs_are_added_as_provider_tools() -> None:
    with pytest.raises(ConfigError, match="'web_search'"):
        ToolRegistry().add_provider_tools([SEARCH.model_copy(update={"provider": False})])
