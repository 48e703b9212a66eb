"""The tools of the configured MCP servers (`tools/providers.py`), named `<server>__<tool>`: the
connections are the runtime's, held across activations; a call runs in the tool step like any
other, under the same breakers and caps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from persyn.tools.mcp.servers import McpTools
from persyn.tools.providers import ToolProvider, ToolScope
from persyn.tools.registry import Tool

__all__ = ["MCP"]


def _mcp(scope: ToolScope) -> Sequence[Tool[Any, Any]]:
    servers = scope.service(McpTools)
    return () if servers is None else servers.tools()


# `__` never appears in a built-in tool's name; giving way keeps a server from shadowing one anyway.
MCP = ToolProvider("mcp", _mcp, gives_way=True)
