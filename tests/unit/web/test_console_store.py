"""The web console's one store per process (`SharedStore`): while bound, the operator
commands' logic reads through that one store (opened once, left open between requests, one
for concurrent requests), and it is closed with the process — a real SQLite store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.ops.autonomy import agent_reminders
from persyn.ops.history import SharedStore, opened_capability, opened_store
from persyn.store.capabilities import ScheduleStore

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(NOW))


def _settings(tmp_path: Path) -> Settings:
    return load_settings(tmp_path, environ={}).model_copy(update={"agents": [AGENT]})


async def test_while_bound_every_read_is_the_one_store_left_open_for_its_owner(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    shared = SharedStore(settings)
    with shared.bound():
        async with opened_store(settings) as first:
            pass
        async with opened_capability(settings, ScheduleStore) as schedule:
            assert schedule is first
        # Requests at once share it too: it is opened (and set up) once.
        stores = await asyncio.gather(*(shared.get() for _ in range(5)))
        assert all(store is first for store in stores)
        # The commands' logic runs on it and leaves it open.
        assert await agent_reminders(settings, AGENT, include_cancelled=True) == []
        await first.ensure_agent(AGENT.id, AGENT.name, NOW)
    # Unbound (the CLI): a store of its own per call, closed after.
    async with opened_store(settings) as own:
        assert own is not first
    await shared.close()
    with pytest.raises(Exception, match=r"(?i)closed|not open|no active connection"):
        await first.ensure_agent(AGENT.id, AGENT.name, NOW)
    with pytest.raises(InputError, match="closed"), shared.bound():
        async with opened_store(settings):
            pass


async def test_a_store_for_other_settings_is_not_the_bound_one(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "a")
    other = _settings(tmp_path / "b")
    shared = SharedStore(settings)
    try:
        with shared.bound():
            async with opened_store(settings) as mine, opened_store(other) as theirs:
                assert mine is not theirs
    finally:
        await shared.close()
    await shared.close()  # twice is harmless
