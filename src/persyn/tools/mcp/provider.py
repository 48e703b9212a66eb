"""The tools of the configured MCP servers (`tools/providers.py`), named `<server>__<tool>`: the
connections are the runtime's, held across activations; a call runs in the tool step like any
other, under the same breakers and caps."""

from __future__ import annotations

from persyn.tools.providers import ToolProvider

__all__ = ["MCP"]

# `__` never appears in a built-in tool's name; giving way keeps a server from shadowing one anyway.
MCP = ToolProvider("mcp", lambda scope: () if scope.mcp is None else scope.mcp.tools(), gives_way=True)
