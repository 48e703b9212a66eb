"""A hostile MCP server on the official SDK's `MCPServer` (issue 33, item 8): a 50 MB result,
a call that hangs the whole server, and noise on stderr. `python mcp_hostile_server.py` serves
stdio; `... http PORT [json]` serves streamable HTTP on loopback (event streams, or JSON bodies).

`flood_counted` writes its 50 MB answer to stdout itself, in 64 KiB pieces, and after each piece
writes how many bytes the pipe has taken to the file named by `HOSTILE_PROGRESS`: a reader that
stops at its bound leaves that number near the bound (the pipe holds 64 KiB more at most).
"""

from __future__ import annotations

import json
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer

FLOOD_BYTES = 50_000_000
PIECE = 65_536

server = MCPServer("hostile")
# The SDK moves the protocol off fd 1 (stray prints go to stderr); keep a copy of the pipe
# the client reads, for `flood_counted` to write its answer to.
WIRE = os.dup(1)


@server.tool()
def echo(message: str) -> str:
    """Says the message back."""
    return f"echo: {message}"


@server.tool()
def whoami() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool()
def flood() -> str:
    """A 50 MB result."""
    return "x" * FLOOD_BYTES


@server.tool()
async def flood_counted(ctx: Context) -> str:
    """A 50 MB result written piece by piece, counting what the client took."""
    raw = ctx.request_id
    head = json.dumps({"jsonrpc": "2.0", "id": int(raw) if raw.isdigit() else raw})[:-1]
    answer = (head + ',"result":{"content":[{"type":"text","text":"').encode()
    answer += b"x" * FLOOD_BYTES + b'"}]}}\n'
    progress = os.environ["HOSTILE_PROGRESS"]
    taken = 0
    while taken < len(answer):
        taken += os.write(WIRE, answer[taken : taken + PIECE])
        with open(progress + ".new", "w", encoding="utf-8") as out:  # noqa: ASYNC230 (hostile: blocks)
            out.write(str(taken))
        os.replace(progress + ".new", progress)  # whole numbers only, even if killed here
    time.sleep(3600)  # noqa: ASYNC251 (never answers through the SDK: the answer was forged above)
    return "unreachable"


@server.tool()
async def hang() -> str:
    """Blocks the server's only thread: nothing else it is asked is answered."""
    time.sleep(3600)  # noqa: ASYNC251 (the point: the whole server hangs)
    return "unreachable"


if __name__ == "__main__":
    print("hostile server: starting, and this line is for its log only", file=sys.stderr, flush=True)
    if sys.argv[1:2] == ["http"]:
        server.run(
            transport="streamable-http",
            host="127.0.0.1",
            port=int(sys.argv[2]),
            json_response=sys.argv[3:4] == ["json"],
        )
    else:
        server.run()
