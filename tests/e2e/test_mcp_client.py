"""The MCP client (SPEC §4.6) against servers written by others, started by the tests: the npm
"everything" server over stdio and streamable HTTP, PyPI's `mcp-server-time`, and a server on
the official SDK whose tool list changes. Tools are namespaced per server, filtered by
include/exclude, checked against their schemas before anything is sent; a server that cannot
be reached offers nothing and is reported; a dropped connection comes back on the next call."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from mcp_test_servers import (
    EVERYTHING,
    EverythingHttp,
    children_running,
    everything_stdio,
    free_port,
    time_stdio,
    unlock_stdio,
)

from persyn.core.config import McpConfig
from persyn.gateway.base import ToolCall
from persyn.tools.mcp.servers import McpTools, server_content
from persyn.tools.registry import ToolRegistry, ToolStatus

pytestmark = pytest.mark.e2e


def _config(*servers: dict[str, Any], **extra: Any) -> McpConfig:
    return McpConfig.model_validate({"servers": list(servers), **extra}, strict=False)


async def _call(mcp: McpTools, name: str, **args: Any) -> Any:
    return await ToolRegistry(mcp.tools()).call(ToolCall(id="c1", name=name, args=args))


async def test_two_servers_are_namespaced_filtered_and_called() -> None:
    config = _config(
        everything_stdio(exclude=["get-env", "trigger-long-running-operation"]),
        time_stdio(include=["get_current_time"]),
    )
    async with McpTools(config) as mcp:
        names = [tool.name for tool in mcp.tools()]
        assert "everything__echo" in names and "everything__get-sum" in names
        assert (
            "everything__get-env" not in names and "everything__trigger-long-running-operation" not in names
        )
        assert [n for n in names if n.startswith("time__")] == ["time__get_current_time"]
        assert all(status.connected and status.error is None for status in mcp.statuses())
        echoed = await _call(mcp, "everything__echo", message="hello from persyn")
        assert echoed.status is ToolStatus.OK and echoed.output == {
            "notice": server_content("everything"),  # what a server relays is others' words
            "result": "Echo: hello from persyn",
        }
        total = await _call(mcp, "everything__get-sum", a=2, b=40)
        assert total.ok and "42" in total.output["result"]
        now = await _call(mcp, "time__get_current_time", timezone="Europe/Paris")
        assert now.ok and "Europe/Paris" in now.output["result"]
        refused = await _call(
            mcp, "time__convert_time", source_timezone="UTC", time="10:00", target_timezone="Asia/Tokyo"
        )
        assert refused.status is ToolStatus.UNKNOWN_TOOL  # not included: not offered, not callable
        excluded = await _call(mcp, "everything__get-env")
        assert excluded.status is ToolStatus.UNKNOWN_TOOL  # would show the server's environment


async def test_arguments_are_checked_against_the_servers_schema_before_sending() -> None:
    async with McpTools(_config(everything_stdio(include=["get-sum"]))) as mcp:
        bad = await _call(mcp, "everything__get-sum", a="two", b=40)
        assert bad.status is ToolStatus.INVALID_ARGUMENTS
        assert "a: 'two' is not of type 'number'" in bad.content
        missing = await _call(mcp, "everything__get-sum", a=1)
        assert (
            missing.status is ToolStatus.INVALID_ARGUMENTS and "'b' is a required property" in missing.content
        )


async def test_images_and_resources_reach_the_model_as_text() -> None:
    async with McpTools(
        _config(everything_stdio(include=["get-tiny-image", "get-resource-reference"]))
    ) as mcp:
        image = await _call(mcp, "everything__get-tiny-image")
        assert image.ok
        lines = image.output["result"].splitlines()
        assert (
            lines[0] == "Here's the image you requested:" and lines[-1] == "The image above is the MCP logo."
        )
        assert lines[1].startswith("[image (image/png, about ") and "not shown" in lines[1]
        resource = await _call(mcp, "everything__get-resource-reference", resourceId=3)
        assert resource.ok and "[resource <demo://resource/dynamic/text/3>]" in resource.output["result"]
        assert "Resource 3: This is a plaintext resource" in resource.output["result"]


async def test_unreachable_servers_offer_no_tools_are_reported_and_block_nothing() -> None:
    config = _config(
        {"name": "closed-port", "url": f"http://127.0.0.1:{free_port()}/mcp"},
        {"name": "no-such-program", "command": "/nonexistent/mcp-server"},
        {"name": "crashes", "command": "node", "args": ["-e", "process.exit(3)"]},
        time_stdio(),
    )
    async with McpTools(config) as mcp:
        status = {s.name: s for s in mcp.statuses()}
        for name in ("closed-port", "no-such-program", "crashes"):
            assert not status[name].connected and status[name].tools == () and status[name].error
        assert "ConnectError" in (status["closed-port"].error or "")
        assert status["time"].connected and status["time"].tools
        assert {tool.name.split("__")[0] for tool in mcp.tools()} == {"time"}
        notice = mcp.notice() or ""
        assert "closed-port" in notice and "no-such-program" in notice and "crashes" in notice
        assert "time" not in notice.split(":", 1)[1]


async def test_a_server_that_never_answers_is_given_up_at_the_connect_timeout() -> None:
    config = _config({"name": "mute", "command": "sleep", "args": ["600"]}, connect_timeout_seconds=1.0)
    async with McpTools(config) as mcp:
        (status,) = mcp.statuses()
        assert not status.connected and status.error == "no answer within 1 seconds" and mcp.tools() == ()
    assert children_running(Path("sleep")) == []  # the child was stopped with the attempt


async def test_a_killed_stdio_server_is_started_again_by_the_next_call() -> None:
    async with McpTools(_config(everything_stdio(include=["echo"]))) as mcp:
        assert (await _call(mcp, "everything__echo", message="one")).ok
        (child,) = children_running(EVERYTHING)
        os.kill(child, signal.SIGKILL)
        again = await _call(mcp, "everything__echo", message="two")
        assert again.ok and again.output["result"] == "Echo: two"
        assert mcp.servers[0].reconnects == 1
        assert children_running(EVERYTHING) not in ([], [child])


async def test_a_restarted_http_server_is_reconnected_and_a_down_one_is_an_error_result() -> None:
    server = EverythingHttp().start()
    try:
        config = _config({"name": "web", "url": server.url, "include": ["echo"]}, reconnect_attempts=1)
        async with McpTools(config) as mcp:
            assert (await _call(mcp, "web__echo", message="before")).ok
            server.kill()
            down = await _call(mcp, "web__echo", message="while down")
            assert down.status is ToolStatus.FAILED
            assert "MCP server 'web' is unreachable after 2 attempt(s)" in down.content
            server.start()  # the same port, a new process that knows no session
            back = await _call(mcp, "web__echo", message="after the restart")
            assert back.ok and back.output["result"] == "Echo: after the restart"
    finally:
        server.kill()


async def test_list_changed_refreshes_the_offered_tools() -> None:
    async with McpTools(_config(unlock_stdio())) as mcp:
        assert [tool.name for tool in mcp.tools()] == ["lock__unlock"]
        before = mcp.version
        assert (await _call(mcp, "lock__unlock")).ok
        async with asyncio.timeout(20):
            await mcp.wait_for_change(before)
        assert [tool.name for tool in mcp.tools()] == ["lock__secret", "lock__unlock"]
        secret = await _call(mcp, "lock__secret")
        assert secret.ok and secret.output["result"] == "the secret is 42"
