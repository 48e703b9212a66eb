"""A small MCP server on the official SDK's `MCPServer` (stdio) whose tool list changes: calling
`unlock` adds the tool `secret` and notifies the client with `tools/list_changed`."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("unlock")


def secret() -> str:
    """Tells the secret (offered only after `unlock`)."""
    return "the secret is 42"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Adds the tool `secret` to this server's tools."""
    server.add_tool(secret)
    await ctx.notify_tools_changed()
    return "unlocked"


if __name__ == "__main__":
    server.run()
