"""The entry points persyn declares for its channels and tool groups: each loads to what its
registry takes, and the registries see every one (from this checkout's `pyproject.toml`, whatever
metadata an earlier install left)."""

from __future__ import annotations

import logging
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest

from persyn.channels.registry import ChannelPlugin, channel_plugins
from persyn.core.plugins import declared, loaded
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


def test_a_broken_or_foreign_entry_is_skipped_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A third party's distribution declares three entries in a group: one that is what the group
    takes, one whose module does not exist, one that is something else. Only the first is loaded;
    the other two are logged by name and the group still works."""
    dist = tmp_path / "someone_else-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: someone-else\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[persyn.test_group]\n"
        "good = fractions:Fraction\n"
        "missing = no_such_module_anywhere:thing\n"
        "foreign = json:dumps\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="persyn.core.plugins"):
        found = loaded("persyn.test_group", type)
    assert found == [Fraction]
    said = caplog.text
    assert "'missing' (no_such_module_anywhere:thing) failed to load" in said
    assert "'foreign' (json:dumps) is not a type" in said
