"""A hostile MCP server cannot flood or stall the agent (issue 33, item 8), and MCP servers'
stderr stays off the operator's terminal (item 13).

On 4c92b50 a 50 MB result was read whole by the SDK's stdio reader (minutes of CPU), the call
timed out, and the next call to the same server timed out too, since the server was still busy.
Now a result is held to `[mcp] max_result_bytes` as it arrives, over stdio and streamable
HTTP: past it the call fails with that reason, the reading stops (the server is cut off near
the bound), and a server whose call timed out or was cut off is restarted before its next call.
The servers are real: `mcp_hostile_server.py` on the SDK's `MCPServer`, in a subprocess.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_test_servers import children_running, free_port
from persyn_cli import Persyn

from persyn.core.config import McpConfig
from persyn.gateway.base import ToolCall
from persyn.tools.mcp.servers import McpTools
from persyn.tools.registry import ToolOutcome, ToolRegistry, ToolStatus

pytestmark = pytest.mark.e2e

HOSTILE = Path(__file__).resolve().parent / "mcp_hostile_server.py"
LIMIT = 1_048_576  # the default [mcp] max_result_bytes
PIECE = 65_536  # what the hostile server writes at a time (`mcp_hostile_server.PIECE`)


def _stdio(name: str = "hostile", **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [str(HOSTILE)], **extra}


def _config(*servers: dict[str, Any], **extra: Any) -> McpConfig:
    return McpConfig.model_validate({"servers": list(servers), **extra}, strict=False)


async def _call(mcp: McpTools, name: str, **args: Any) -> ToolOutcome:
    return await ToolRegistry(mcp.tools()).call(ToolCall(id="c1", name=name, args=args))


async def _text(mcp: McpTools, name: str, **args: Any) -> str:
    """The text a call that succeeded gave the model."""
    outcome = await _call(mcp, name, **args)
    assert outcome.ok and outcome.output is not None, outcome.content
    return str(outcome.output["result"])


def _too_large(result: ToolOutcome, server: str = "hostile") -> bool:
    return (
        result.status is ToolStatus.FAILED
        and f"MCP server {server!r} answered with more than {LIMIT} bytes ([mcp] max_result_bytes)"
        in result.content
        and "the result was dropped" in result.content
    )


async def test_a_50_mb_stdio_result_is_dropped_and_the_server_answers_again() -> None:
    async with McpTools(_config(_stdio(timeout_seconds=120))) as mcp:
        first = await _text(mcp, "hostile__whoami")
        flood = await _call(mcp, "hostile__flood")
        assert _too_large(flood), flood.content
        assert await _text(mcp, "hostile__echo", message="still here") == "echo: still here"
        assert await _text(mcp, "hostile__whoami") != first  # a fresh process
        assert mcp.servers[0].restarts == 1


async def test_a_stdio_result_is_cut_off_near_the_bound_as_it_arrives(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    config = _config(_stdio(env={"HOSTILE_PROGRESS": str(progress)}, timeout_seconds=120))
    async with McpTools(config) as mcp:
        flood = await _call(mcp, "hostile__flood_counted")
        assert _too_large(flood), flood.content
        assert children_running(HOSTILE) == []  # stopped where it was
        taken = int(progress.read_text(encoding="utf-8"))
        # the reader stopped just past the bound: the rest of the 50 MB was never taken. The
        # server counts a piece after the pipe took it, so when it is stopped between the two
        # the count lags one piece behind what was read (it read more than LIMIT)
        assert LIMIT - PIECE < taken < 2 * LIMIT, taken
        assert (await _call(mcp, "hostile__echo", message="after")).ok


async def test_a_call_that_times_out_restarts_the_server_before_the_next_call() -> None:
    async with McpTools(_config(_stdio(timeout_seconds=3))) as mcp:
        first = await _text(mcp, "hostile__whoami")
        hung = await _call(mcp, "hostile__hang")
        assert hung.status is ToolStatus.FAILED
        assert "did not answer within 3 seconds; it is restarted before its next call" in hung.content
        # the hung process, still blocked, would never answer this: a new one does
        assert await _text(mcp, "hostile__echo", message="after the hang") == "echo: after the hang"
        assert await _text(mcp, "hostile__whoami") != first
        assert mcp.servers[0].restarts == 1
        assert len(children_running(HOSTILE)) == 1


@pytest.fixture(params=["events", "json"])
def hostile_http(request: pytest.FixtureRequest) -> Iterator[str]:
    port = free_port()
    mode = ["json"] if request.param == "json" else []
    process = subprocess.Popen(
        [sys.executable, str(HOSTILE), "http", str(port), *mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the hostile server exited with {process.returncode}"
            assert time.monotonic() < deadline, "the hostile server did not listen"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)


async def test_a_50_mb_http_result_is_dropped_and_the_server_answers_again(hostile_http: str) -> None:
    async with McpTools(_config({"name": "web", "url": hostile_http, "timeout_seconds": 120})) as mcp:
        flood = await _call(mcp, "web__flood")
        assert _too_large(flood, "web"), flood.content
        assert await _text(mcp, "web__echo", message="still here") == "echo: still here"


async def test_a_stdio_servers_stderr_goes_to_its_log_file(tmp_path: Path) -> None:
    async with McpTools(_config(_stdio()), log_dir=tmp_path / "logs") as mcp:
        assert (await _call(mcp, "hostile__echo", message="hi")).ok
    log = (tmp_path / "logs" / "mcp-hostile.log").read_text(encoding="utf-8")
    assert "this line is for its log only" in log


def test_the_cli_keeps_mcp_servers_stderr_off_the_terminal(persyn: Persyn) -> None:
    config = persyn.home / "persyn.toml"
    with config.open("a", encoding="utf-8") as out:
        out.write(
            f'\n[[mcp.servers]]\nname = "hostile"\ncommand = {sys.executable!r}\nargs = [{str(HOSTILE)!r}]\n'
        )
    done = persyn.run("tools", "list")
    assert done.returncode == 0, done.stderr
    assert "hostile__echo" in done.stdout
    assert "for its log only" not in done.stderr + done.stdout
    log = persyn.home / "data" / "logs" / "mcp-hostile.log"
    assert "this line is for its log only" in log.read_text(encoding="utf-8")
