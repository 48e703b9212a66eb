"""The entry points persyn declares for its channels and tool groups: each loads to what its
registry takes, and the registries see every one (from this checkout's `pyproject.toml`, whatever
metadata an earlier install left)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from persyn.channels.registry import ChannelPlugin, channel_plugins
from persyn.plugins import declared
from persyn.tools.providers import ToolProvider, tool_providers

ROOT = Path(__file__).resolve().parents[2]


def _table(group: str) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["entry-points"][group]


def test_every_declared_channel_loads_and_is_registered() -> None:
    table = _table("persyn.channels")
    assert {point.name: point.value for point in declared("persyn.channels")}.items() >= table.items()
    for value in table.values():
        module, _, name = value.partition(":")
        assert isinstance(getattr(__import__(module, fromlist=[name]), name), ChannelPlugin)
    services = [plugin.service for plugin in channel_plugins()]
    assert services[:4] == ["agent", "irc", "telegram", "matrix"]  # connected and probed in this order
    assert {"terminal", "web"} <= set(services)


def test_every_declared_tool_group_loads_and_is_registered() -> None:
    table = _table("persyn.tools")
    assert {point.name: point.value for point in declared("persyn.tools")}.items() >= table.items()
    providers = tool_providers()
    assert all(isinstance(provider, ToolProvider) for provider in providers)
    assert len(providers) == len(table)
    assert [provider.name for provider in providers if provider.gives_way] == ["mcp"]
    assert providers[-1].name == "mcp"  # asked last: its tools give way to the others
