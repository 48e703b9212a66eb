"""Shared artifacts through the agents' real tool registry (`persyn tools call`'s path, a real
SQLite store): two agents write one document together and each sees its own contributions;
a stale write is refused and stores nothing; a stranger on another channel sees nothing,
not even that the name is taken; a compartment shares; limits and bad names are refused."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Settings
from persyn.core.ids import new_id
from persyn.ops.tools import call_tool
from persyn.testing import ADA, START, harness_settings
from persyn.tools.builtin.artifacts import others_words
from persyn.tools.registry import ToolOutcome, ToolStatus

BEA = AgentConfig(name="Bea", id=new_id(START + timedelta(seconds=1)))
ROOM = "test:room"


def _settings(tmp_path: Path, config: str = "") -> Settings:
    settings = harness_settings(tmp_path / "home", config="[sandbox]\nenabled = false\n" + config)
    return settings.model_copy(update={"agents": [ADA, BEA]})


class Desk:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.clock = ManualClock(START)

    async def call(
        self, agent: AgentConfig, tool: str, channel: str = ROOM, /, **arguments: Any
    ) -> ToolOutcome:
        self.clock.advance(timedelta(minutes=1))
        return await call_tool(self.settings, agent, self.clock, tool, arguments, channel)

    async def ok(
        self, agent: AgentConfig, tool: str, channel: str = ROOM, /, **arguments: Any
    ) -> dict[str, Any]:
        outcome = await self.call(agent, tool, channel, **arguments)
        assert outcome.ok, outcome.content
        assert outcome.output is not None
        return outcome.output


async def test_two_agents_write_one_document_and_each_knows_its_part(tmp_path: Path) -> None:
    desk = Desk(_settings(tmp_path))
    created = await desk.ok(ADA, "workspace_write", name="plan.md", content="1. Kyoto", note="first draft")
    assert created == {"name": "plan.md", "channel": ROOM, "version": 1}
    read = await desk.ok(BEA, "workspace_read", name="plan.md")
    assert (read["content"], read["author"], read["yours"], read["latest"]) == ("1. Kyoto", "Ada", False, 1)
    assert read["notice"] == others_words("Ada")  # another agent's words, marked as such
    await desk.ok(
        BEA, "workspace_write", name="plan.md", content="1. Kyoto\n2. Nara", base_version=1, note="Nara"
    )
    await desk.ok(
        ADA, "workspace_write", name="plan.md", content="1. Kyoto\n2. Nara\n3. Osaka", base_version=2
    )
    mine = await desk.ok(ADA, "workspace_read", name="plan.md")
    assert [(h["version"], h["author"], h["yours"], h["note"]) for h in mine["history"]] == [
        (1, "Ada", True, "first draft"),
        (2, "Bea", False, "Nara"),
        (3, "Ada", True, ""),
    ]
    theirs = await desk.ok(BEA, "workspace_read", name="plan.md", version=2)
    assert theirs["content"] == "1. Kyoto\n2. Nara" and theirs["yours"] and theirs["latest"] == 3
    assert theirs["notice"] is None
    (listed,) = (await desk.ok(BEA, "workspace_list"))["artifacts"]
    assert (listed["name"], listed["latest"], listed["last_author"]) == ("plan.md", 3, "Ada")
    assert (listed["your_versions"], listed["others_versions"]) == (1, 2)


async def test_a_stale_or_blind_write_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    desk = Desk(_settings(tmp_path))
    await desk.ok(ADA, "workspace_write", name="notes", content="a")
    await desk.ok(BEA, "workspace_write", name="notes", content="ab", base_version=1)
    stale = await desk.call(ADA, "workspace_write", name="notes", content="a + mine", base_version=1)
    assert stale.status is ToolStatus.FAILED
    assert "is at version 2 now (by Bea), not 1: read it again and merge" in stale.content
    blind = await desk.call(ADA, "workspace_write", name="notes", content="overwrite")
    assert "already exists (version 2, by Bea): read it, then write with base_version" in blind.content
    assert (await desk.ok(ADA, "workspace_read", name="notes"))["content"] == "ab"


async def test_a_stranger_on_another_channel_sees_nothing_and_cannot_touch_it(tmp_path: Path) -> None:
    desk = Desk(_settings(tmp_path))
    await desk.ok(ADA, "workspace_write", name="secret-plan", content="the surprise party is on Friday")
    elsewhere = "test:elsewhere"
    assert (await desk.ok(BEA, "workspace_list", elsewhere))["artifacts"] == []
    hidden = await desk.call(BEA, "workspace_read", elsewhere, name="secret-plan")
    missing = await desk.call(BEA, "workspace_read", elsewhere, name="no-such-thing")
    assert hidden.status is missing.status is ToolStatus.FAILED
    assert hidden.content == missing.content.replace("no-such-thing", "secret-plan")  # no tell-tale
    # Writing the same name from there makes that channel's own artifact; the original stays.
    own = await desk.ok(BEA, "workspace_write", elsewhere, name="secret-plan", content="my own")
    assert own == {"name": "secret-plan", "channel": elsewhere, "version": 1}
    original = await desk.ok(ADA, "workspace_read", name="secret-plan")
    assert original["content"] == "the surprise party is on Friday" and original["latest"] == 1
    # Even the author, from another channel, does not bring it there.
    assert (await desk.ok(ADA, "workspace_read", elsewhere, name="secret-plan"))["content"] == "my own"


async def test_a_compartment_shares_its_artifacts(tmp_path: Path) -> None:
    desk = Desk(_settings(tmp_path, '[memory]\nchannel_groups = [["test:room", "test:annex"]]\n'))
    await desk.ok(ADA, "workspace_write", name="shared", content="v1")
    seen = await desk.ok(BEA, "workspace_read", "test:annex", name="shared")
    assert seen["channel"] == ROOM
    written = await desk.ok(BEA, "workspace_write", "test:annex", name="shared", content="v2", base_version=1)
    assert written == {"name": "shared", "channel": ROOM, "version": 2}  # the same artifact, not a copy
    assert (await desk.ok(ADA, "workspace_list", "test:outside"))["artifacts"] == []


@pytest.mark.parametrize("name", ["", "../etc/passwd", "a/b", "x" * 121, " leading"])
async def test_bad_names_and_oversized_content_are_refused(tmp_path: Path, name: str) -> None:
    desk = Desk(_settings(tmp_path, "[artifacts]\nmax_chars = 100\n"))
    bad = await desk.call(ADA, "workspace_write", name=name, content="x")
    assert bad.status is ToolStatus.INVALID_ARGUMENTS and "is not an artifact name" in bad.content
    big = await desk.call(ADA, "workspace_write", name="big", content="x" * 101)
    assert big.status is ToolStatus.FAILED and "at most 100 ([artifacts] max_chars)" in big.content
    assert (await desk.ok(ADA, "workspace_list"))["artifacts"] == []
