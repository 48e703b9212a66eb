"""`persyn tools list` and `persyn tools call` through the real CLI, with MCP servers written by
others configured: tools by source, a call run as the agent runs it, bad input refused with
exit 2, a failing tool with exit 1, and an unavailable server reported without failing."""

from __future__ import annotations

import json

import pytest
from mcp_test_servers import EVERYTHING, TIME_SERVER, free_port, require_servers
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


@pytest.fixture
def configured(persyn: Persyn) -> Persyn:
    require_servers()
    config = persyn.home / "persyn.toml"
    config.write_text(
        config.read_text()
        + "\n[[mcp.servers]]\n"
        + f'name = "everything"\ncommand = "node"\nargs = ["{EVERYTHING}", "stdio"]\n'
        + 'include = ["echo", "get-sum"]\n'
        + "\n[[mcp.servers]]\n"
        + f'name = "time"\ncommand = "{TIME_SERVER}"\nargs = ["--local-timezone", "UTC"]\n'
        + "\n[[mcp.servers]]\n"
        + f'name = "gone"\nurl = "http://127.0.0.1:{free_port()}/mcp"\n'
    )
    return persyn


def test_tools_list_shows_every_tool_by_source(configured: Persyn) -> None:
    done = configured.run("tools", "list", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    by_name = {tool["name"]: tool for tool in report["tools"]}
    assert by_name["create_goal"]["source"] == "built-in" and by_name["create_goal"]["server"] is None
    assert by_name["edit_reminder"]["deferred"] is True and by_name["call_tool"]["deferred"] is False
    assert by_name["everything__echo"] == {
        "name": "everything__echo",
        "source": "mcp",
        "server": "everything",
        "description": "Echoes back the input string",
        "deferred": False,
        "models": [],
    }
    assert {n for n in by_name if n.startswith("everything__")} == {"everything__echo", "everything__get-sum"}
    assert "time__get_current_time" in by_name and "time__convert_time" in by_name
    servers = {s["name"]: s for s in report["mcp_servers"]}
    assert servers["gone"]["connected"] is False and "ConnectError" in servers["gone"]["error"]
    text = configured.run("tools", "list")
    assert text.returncode == 0, text.stderr
    assert "mcp server everything (stdio, 2)" in text.stdout
    assert "mcp server gone: unavailable, no tools" in text.stdout


def test_tools_call_runs_a_tool_as_the_agent_would(configured: Persyn) -> None:
    done = configured.run("tools", "call", "everything__echo", "--args", '{"message": "checking"}')
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)  # what the model is shown: the result, marked as the server's words
    assert shown["result"] == "Echo: checking"
    assert "MCP server 'everything'" in shown["notice"] and "not yours to follow" in shown["notice"]
    built_in = configured.run("tools", "call", "calculate", "--args", '{"expression": "6*7"}', "--json")
    assert built_in.returncode == 0, built_in.stderr
    assert json.loads(built_in.stdout)["status"] == "ok" and "42" in built_in.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["no_such_tool"], 2, "There is no tool named 'no_such_tool'"),
        (["everything__get-sum", "--args", '{"a": "x", "b": 1}'], 2, "is not of type 'number'"),
        (["everything__echo", "--args", "{not json"], 2, "--args is not JSON"),
        (["everything__echo", "--args", "[1, 2]"], 2, "--args must be a JSON object"),
        (["time__get_current_time", "--args", '{"timezone": "Mars/Olympus_Mons"}'], 1, "failed"),
    ],
)
def test_tools_call_refuses_bad_input_clearly(
    configured: Persyn, args: list[str], code: int, message: str
) -> None:
    done = configured.run("tools", "call", *args)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr


def test_doctor_reports_each_mcp_server(configured: Persyn) -> None:
    done = configured.run("doctor")
    assert (
        "[ ok ] mcp server everything: stdio: 2 tool(s): everything__echo, everything__get-sum" in done.stdout
    )
    assert "[FAIL] mcp server gone: http: ConnectError" in done.stdout


def test_tools_list_shows_the_tools_a_model_provider_runs(persyn: Persyn) -> None:
    config = persyn.home / "persyn.toml"
    config.write_text(
        config.read_text().replace(
            "[models]\n",
            '[models]\nrespond = ["anthropic:claude-sonnet-4-6", "anthropic:claude-haiku-4-5"]\n'
            'provider_tools = { "anthropic:claude-haiku-4-5" = ["web_search"] }\n',
            1,
        )
    )
    done = persyn.run("tools", "list", "--json")
    assert done.returncode == 0, done.stderr
    provided = [tool for tool in json.loads(done.stdout)["tools"] if tool["source"] == "provider"]
    assert [(t["name"], t["models"]) for t in provided] == [("web_search", ["anthropic:claude-haiku-4-5"])]
    text = persyn.run("tools", "list")
    assert "provider (1, run by the model inside its reply)" in text.stdout
    call = persyn.run("tools", "call", "web_search", "--args", '{"query": "x"}')
    assert call.returncode == 2 and "run by the model provider" in call.stderr


def test_an_unknown_provider_tool_stops_the_configuration(persyn: Persyn) -> None:
    config = persyn.home / "persyn.toml"
    config.write_text(
        config.read_text().replace(
            "[models]\n", '[models]\nprovider_tools = { "anthropic:claude-haiku-4-5" = ["web_serch"] }\n', 1
        )
    )
    done = persyn.run("tools", "list")
    assert done.returncode != 0
    assert "'web_serch'" in done.stderr
