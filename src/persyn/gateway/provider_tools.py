"""Provider-executed tools (SPEC §4.6): tools the model provider runs itself,
inside its reply — Anthropic's server tools, `web_search` and `web_fetch`.

They are enabled per model string (`[models] provider_tools`), because only a model whose
provider runs them can be offered them. The agent's registry lists them like any other tool
(`ToolSpec(provider=True)`, source `provider` in `persyn tools list`); the gateway turns
them into pydantic-ai native tools on the request (`native_tools`), and each model of a
task's chain keeps only the ones enabled for it (`ProviderToolsModel`), so a fallback model
without them is not offered them. A local tool of the same name (our own `web_search`) goes
out marked `unless_native`: pydantic-ai withholds it from a model that runs the provider's
tool and sends it to the others.

Their calls and results come back inline in the reply (`server_tool_use` and
`web_search_tool_result` blocks, pydantic-ai's `NativeToolCallPart`/`NativeToolReturnPart`):
the model reads them in the same round-trip and the tool loop never sees a call to run. A
reply the provider paused (`pause_turn`) is resumed by the gateway (`ModelGateway.complete`),
a bounded number of times; the requests each round-trip made are counted on its usage record
(`tool_requests`), priced by `[prices] per_request`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.native_tools import AbstractNativeTool, WebFetchTool, WebSearchTool

from persyn.core.config import AgentConfig, Settings, Task
from persyn.gateway.base import ToolSpec
from persyn.gateway.wrappers import CallHooks, HookedModel

__all__ = [
    "PROVIDER_TOOL_DESCRIPTIONS",
    "ProviderToolsModel",
    "enabled_provider_tools",
    "native_tools",
    "provider_tool_specs",
]

PROVIDER_TOOL_DESCRIPTIONS: Mapping[str, str] = {
    "web_search": "Search the web (run by the model provider; results come back inside the reply).",
    "web_fetch": "Fetch a web page or PDF (run by the model provider; its text comes back inside the reply).",
}


def enabled_provider_tools(settings: Settings, *model_strings: str) -> frozenset[str]:
    """The provider tools configured for a model, looked up under each of its strings (as
    configured, then as parsed)."""
    configured = settings.models.provider_tools
    for model in model_strings:
        if model in configured:
            return frozenset(configured[model])
    return frozenset()


def provider_tool_specs(
    settings: Settings, agent: AgentConfig, task: Task = Task.RESPOND
) -> tuple[ToolSpec, ...]:
    """The provider tools any model of `task`'s chain runs, as the registry lists them."""
    names: set[str] = set()
    for model in settings.models_for(agent, task):
        names |= enabled_provider_tools(settings, model)
    return tuple(
        ToolSpec(name=name, description=PROVIDER_TOOL_DESCRIPTIONS[name], parameters={}, provider=True)
        for name in sorted(names)
    )


def native_tools(specs: Collection[ToolSpec], max_uses: int) -> list[AbstractNativeTool]:
    """The pydantic-ai native tools for the provider tools among `specs`."""
    tools: list[AbstractNativeTool] = []
    for spec in specs:
        if not spec.provider:
            continue
        if spec.name == "web_search":
            tools.append(WebSearchTool(max_uses=max_uses))
        elif spec.name == "web_fetch":
            tools.append(WebFetchTool(max_uses=max_uses))
    return tools


class ProviderToolsModel(HookedModel):
    """One model of a chain, offered only the provider tools enabled for it: the others are
    taken off each request (and a local tool they stood in for goes out instead)."""

    def __init__(self, wrapped: Model, enabled: frozenset[str]) -> None:
        super().__init__(wrapped)
        self._enabled = enabled

    async def _hooks(self, messages: list[ModelMessage], params: ModelRequestParameters) -> CallHooks:
        if not params.native_tools:
            return CallHooks(params)
        kept = [tool for tool in params.native_tools if tool.kind in self._enabled]
        return CallHooks(
            params if len(kept) == len(params.native_tools) else replace(params, native_tools=kept)
        )
