"""The heartbeat's row (SPEC §4.7): bootstrapped once per agent, deleted durably (a restart
never resurrects it), restored only on request; the agent's tools never see it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.ids import new_id
from persyn.schedule import (
    HEARTBEAT_KIND,
    FireResult,
    IntervalTrigger,
    bootstrap_heartbeat,
    delete_heartbeat,
    heartbeat_id,
    heartbeat_status,
    mark_fired,
    restore_heartbeat,
)
from persyn.store.sqlite.store import SQLiteStore

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
BEAT = 1800


@pytest.fixture
async def path(tmp_path: Path) -> Path:
    return tmp_path / "persyn.db"


@pytest.fixture
async def store(path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(path)
    await opened.setup()
    yield opened
    await opened.close()


async def test_bootstrap_creates_the_heartbeat_once(store: SQLiteStore) -> None:
    agent_id = new_id(T0)
    beat = await bootstrap_heartbeat(store, agent_id, BEAT, T0)
    assert beat is not None
    assert (beat.id, beat.kind) == (heartbeat_id(agent_id), HEARTBEAT_KIND)
    assert beat.trigger == IntervalTrigger(every_seconds=BEAT, start=T0 + timedelta(seconds=BEAT))
    assert beat.next_fire_at == T0 + timedelta(seconds=BEAT)
    again = await bootstrap_heartbeat(store, agent_id, BEAT, T0 + timedelta(hours=5))
    assert again == beat  # a restart changes nothing
    assert await store.list_reminders(agent_id) == []  # not among the agent's own reminders
    assert [r.id for r in await store.list_reminders(agent_id, kind=HEARTBEAT_KIND)] == [beat.id]
    assert heartbeat_id(agent_id) == heartbeat_id(agent_id) != heartbeat_id(new_id(T0))


async def test_it_beats_on_the_scheduler_like_any_recurring_reminder(store: SQLiteStore) -> None:
    agent_id = new_id(T0)
    beat = await bootstrap_heartbeat(store, agent_id, BEAT, T0)
    assert beat is not None
    now = T0 + timedelta(seconds=BEAT)
    (due,) = await store.due_reminders(now)
    assert due.id == beat.id
    assert await mark_fired(store, due, due.next_fire_at, now) is FireResult.ROLLED_FORWARD
    status = await heartbeat_status(store, agent_id)
    assert status is not None and status.next_fire_at == now + timedelta(seconds=BEAT)


async def test_deletion_survives_a_restart_and_restore_wakes_it(path: Path, store: SQLiteStore) -> None:
    agent_id = new_id(T0)
    await bootstrap_heartbeat(store, agent_id, BEAT, T0)
    assert await delete_heartbeat(store, agent_id)
    assert not await delete_heartbeat(store, agent_id)
    await store.close()

    reopened = SQLiteStore(path)  # a full restart: a new store on the same file
    await reopened.setup()
    try:
        assert await bootstrap_heartbeat(reopened, agent_id, BEAT, T0 + timedelta(days=1)) is None
        assert await heartbeat_status(reopened, agent_id) is None
        assert await reopened.due_reminders(T0 + timedelta(days=7)) == []  # a week of sleep

        later = T0 + timedelta(days=8)
        restored = await restore_heartbeat(reopened, agent_id, BEAT, later)
        assert restored.next_fire_at == later + timedelta(seconds=BEAT)
        assert await restore_heartbeat(reopened, agent_id, BEAT, later + timedelta(hours=1)) == restored
        assert await bootstrap_heartbeat(reopened, agent_id, BEAT, later) == restored
    finally:
        await reopened.close()


async def test_a_changed_interval_retimes_the_heartbeat(store: SQLiteStore) -> None:
    agent_id = new_id(T0)
    await bootstrap_heartbeat(store, agent_id, BEAT, T0)
    later = T0 + timedelta(hours=2)
    beat = await bootstrap_heartbeat(store, agent_id, 3600, later)
    assert beat is not None
    assert beat.trigger == IntervalTrigger(every_seconds=3600, start=later + timedelta(hours=1))
    assert beat.next_fire_at == later + timedelta(hours=1)


async def test_racing_starters_create_one_heartbeat(path: Path) -> None:
    agent_id = new_id(T0)
    stores = [SQLiteStore(path) for _ in range(3)]
    try:
        await asyncio.gather(*(s.setup() for s in stores))
        beats = await asyncio.gather(*(bootstrap_heartbeat(s, agent_id, BEAT, T0) for s in stores))
        assert {b.id for b in beats if b is not None} == {heartbeat_id(agent_id)}
        assert len(await stores[0].list_reminders(agent_id, kind=None)) == 1
    finally:
        for s in stores:
            await s.close()


async def test_a_crash_between_row_and_flag_is_finished_on_the_next_start(store: SQLiteStore) -> None:
    agent_id = new_id(T0)
    await bootstrap_heartbeat(store, agent_id, BEAT, T0)
    await store.set_flag(agent_id, "heartbeat:bootstrapped", None)  # as if the flag write was lost
    beat = await bootstrap_heartbeat(store, agent_id, BEAT, T0 + timedelta(minutes=1))
    assert beat is not None and beat.created_at == T0
    assert await store.get_flag(agent_id, "heartbeat:bootstrapped") is not None
