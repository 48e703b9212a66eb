"""What the tool registry costs (SPEC §4.6; issue 19): the standing prompt cost of the tool
definitions every respond call carries — built-ins alone (every tool in full, then with the
default `[tools] deferred`), then with two MCP servers (in full, then deferred behind
`call_tool`), then with 50 skills of a realistic size (their names and descriptions in
`use_skill`'s definition) — goal: at most 2,500 tokens with all of them — and the
round-trip overhead of an MCP call through the registry over the same call made directly with
the SDK on its own session (which is the server's time plus the transport's).

Tokens are the project's estimate (four characters a token, `memory.retrieval.estimate_tokens`)
of the definitions as the gateway sends them (name, description, JSON schema). The servers are
the ones the tests use, installed under `tests/servers` (see `.ci/run`).

    uv run python bench/tools.py [--calls 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from persyn.core.clock import SystemClock
from persyn.core.config import McpConfig
from persyn.core.config.tools import DEFERRED_TOOLS
from persyn.gateway.base import ToolCall
from persyn.memory.retrieval import estimate_tokens
from persyn.ops.tools import OPERATOR_CHANNEL, agent_registry
from persyn.testing import ADA
from persyn.testing.harness import harness_settings
from persyn.tools.mcp.servers import McpTools
from persyn.tools.registry import ToolRegistry

SERVERS = Path(__file__).resolve().parents[1] / "tests" / "servers"
EVERYTHING = SERVERS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
TIME_SERVER = SERVERS / ".venv" / "bin" / "mcp-server-time"
_SERVERS: list[dict[str, Any]] = [
    {"name": "everything", "command": "node", "args": [str(EVERYTHING), "stdio"]},
    {"name": "time", "command": str(TIME_SERVER), "args": ["--local-timezone", "UTC"]},
]


def _definitions(registry: ToolRegistry, names: set[str]) -> str:
    return json.dumps(
        # What the gateway sends of a tool: its name, description and JSON schema (`provider`
        # only says who runs it).
        [
            s.model_dump(mode="json", include={"name", "description", "parameters"})
            for s in registry.specs()
            if s.name in names
        ],
        sort_keys=True,
        separators=(",", ":"),
    )


_TOPICS = (
    "expense reports",
    "trip planning",
    "meeting notes",
    "recipe scaling",
    "garden watering",
    "book summaries",
    "bug triage",
    "invoice checks",
    "workout plans",
    "birthday reminders",
)


def _write_skills(home: Path, count: int) -> None:
    """`count` skills of a realistic size: a one-sentence description of about 120
    characters (what it does and when to use it), instructions and a reference file."""
    for n in range(count):
        topic = _TOPICS[n % len(_TOPICS)]
        folder = home / "skills" / f"{topic.replace(' ', '-')}-{n}"
        (folder / "references").mkdir(parents=True, exist_ok=True)
        description = (
            f"{topic.capitalize()}, variant {n}: the steps, checks and format this household uses; "
            f"use it whenever {topic} come up."
        )
        (folder / "SKILL.md").write_text(
            f"---\nname: {folder.name}\ndescription: {json.dumps(description)}\n---\n\n"
            + "Do the steps.\n" * 40
        )
        (folder / "references" / "format.md").write_text("A long format description.\n" * 100)


async def _standing_cost(home: Path, config: str) -> list[tuple[str, int, int, int]]:
    """Tools, characters and ~tokens of what every respond call carries, by source."""
    settings = harness_settings(home, config=config)
    rows: list[tuple[str, int, int, int]] = []
    async with agent_registry(settings, ADA, SystemClock(), OPERATOR_CHANNEL) as (registry, mcp):
        offered = {spec.name for spec in registry.specs()}
        by_source: dict[str, set[str]] = {"built-in": set()}
        for name in offered:
            by_source.setdefault(mcp.server_of(name) or "built-in", set()).add(name)
        for source, names in by_source.items():
            text = _definitions(registry, names)
            rows.append((f"  {source}", len(names), len(text), estimate_tokens(text)))
        text = _definitions(registry, offered)
        rows.append(("  all offered", len(offered), len(text), estimate_tokens(text)))
    return rows


def _scenarios() -> list[tuple[str, str, int]]:
    servers = "".join(
        "[[mcp.servers]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in server.items())
        for server in _SERVERS
    )
    defer_mcp = "[tools]\ndeferred = " + json.dumps([*DEFERRED_TOOLS, "*__*"]) + "\n"
    return [
        ("built-ins, every tool in full", "[tools]\ndeferred = []\n", 0),
        ("built-ins (default)", "", 0),
        ("+ 2 MCP servers, in full", servers, 0),
        ("+ 2 MCP servers, deferred ('*__*')", defer_mcp + servers, 0),
        ("+ 2 MCP servers deferred + 50 skills", defer_mcp + servers, 50),
    ]


async def _round_trips(calls: int) -> list[tuple[str, float, float, float]]:
    rows: list[tuple[str, float, float, float]] = []
    for label, server, tool, args in (
        ("everything echo (stdio, node)", _SERVERS[0], "echo", {"message": "bench"}),
        (
            "time get_current_time (stdio, python)",
            _SERVERS[1],
            "get_current_time",
            {"timezone": "Europe/Paris"},
        ),
    ):
        direct: list[float] = []
        params = StdioServerParameters(command=server["command"], args=server["args"])
        async with Client(params, cache=None) as client:
            for _ in range(calls):
                started = time.perf_counter()
                await client.call_tool(tool, args)
                direct.append((time.perf_counter() - started) * 1000)
        through: list[float] = []
        config = McpConfig.model_validate({"servers": [server]}, strict=False)
        async with McpTools(config) as mcp:
            registry = ToolRegistry(mcp.tools())
            name = f"{server['name']}__{tool}"
            for n in range(calls):
                started = time.perf_counter()
                outcome = await registry.call(ToolCall(id=str(n), name=name, args=args))
                through.append((time.perf_counter() - started) * 1000)
                assert outcome.ok, outcome.content
        rows.append(
            (
                label,
                statistics.median(direct),
                statistics.median(through),
                statistics.median(through) - statistics.median(direct),
            )
        )
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100, help="calls per server for the round-trip figure")
    options = parser.parse_args()
    if not EVERYTHING.exists() or not TIME_SERVER.exists():
        sys.exit(
            "install the test servers first (see .ci/run): npm ci --prefix tests/servers, and tests/servers/.venv"
        )
    print("standing prompt cost of the tool definitions (every respond call)")
    print(f"{'source':<40}{'tools':>7}{'chars':>9}{'~tokens':>9}")
    for label, config, skills in _scenarios():
        with tempfile.TemporaryDirectory() as root:
            home = Path(root) / "home"
            _write_skills(home, skills)
            rows = await _standing_cost(home, config)
        print(label)
        for source, tools, chars, tokens in rows:
            print(f"{source:<40}{tools:>7}{chars:>9}{tokens:>9}")
    trips = await _round_trips(options.calls)
    print(f"\nMCP call round trip, p50 of {options.calls} (ms)")
    print(f"{'call':<40}{'SDK direct':>12}{'registry':>10}{'overhead':>10}")
    for label, direct, through, overhead in trips:
        print(f"{label:<40}{direct:>12.2f}{through:>10.2f}{overhead:>10.2f}")


if __name__ == "__main__":
    asyncio.run(main())
