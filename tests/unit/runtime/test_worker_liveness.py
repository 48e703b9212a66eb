"""A process that only submits learns at once that no worker is alive (issue 15 item 4a)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.clock import ManualClock
from persyn.core.events import CompletionMarker
from persyn.core.ids import new_id
from persyn.runtime.durable._executor import claim_executor_slot, live_executors
from persyn.runtime.durable.dispatch import Markers, NoWorkerRunning
from persyn.store.sqlite.store import SQLiteStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


def test_live_executors_are_the_held_slots(tmp_path: Path) -> None:
    directory = tmp_path / "executors"
    assert live_executors(directory) == []  # no worker ever ran
    run = claim_executor_slot(directory, "run")
    chat = claim_executor_slot(directory, "chat")
    assert live_executors(directory) == sorted([run.executor_id, chat.executor_id])
    run.release()
    assert live_executors(directory) == [chat.executor_id]
    chat.release()
    assert live_executors(directory) == []
    # Looking takes no slot: a worker starting afterwards still gets slot 0.
    assert claim_executor_slot(directory, "run").executor_id == run.executor_id


async def test_waiting_with_no_worker_alive_ends_at_once_and_a_live_one_is_waited_for(
    store: SQLiteStore, tmp_path: Path
) -> None:
    directory = tmp_path / "executors"
    markers = Markers(store, ManualClock(START))
    agent_id, event_id = new_id(START), new_id(START)

    def alive() -> bool:
        return bool(live_executors(directory))

    with pytest.raises(NoWorkerRunning) as raised:
        await markers.wait(agent_id, event_id, timeout=300, workers_alive=alive)
    assert raised.value.event_id == event_id

    slot = claim_executor_slot(directory, "worker")  # a worker is alive, its turn is slow
    with pytest.raises(TimeoutError):
        await markers.wait(agent_id, event_id, timeout=0.3, workers_alive=alive)
    slot.release()

    # A worker answered, then exited: the answer is returned, not "no worker".
    marker = CompletionMarker(
        event_id=event_id,
        transmitted=True,
        text="hello",
        created_at=START,
        expires_at=START + timedelta(hours=1),
    )
    await store.put_marker(agent_id, marker)
    assert await markers.wait(agent_id, event_id, timeout=300, workers_alive=alive) == marker


async def test_a_worker_finds_a_marker_another_worker_put_for_an_event_in_flight_here(
    store: SQLiteStore,
) -> None:
    """The first read is skipped for an event in flight in this process, but another worker
    may have run it: its marker is still found, and a wait that times out looks once first."""
    markers = Markers(store, ManualClock(START), in_flight=lambda _event_id: True)
    markers.worker = True
    agent_id, event_id = new_id(START), new_id(START)
    marker = CompletionMarker(
        event_id=event_id,
        transmitted=True,
        text="answered elsewhere",
        created_at=START,
        expires_at=START + timedelta(hours=1),
    )
    await store.put_marker(agent_id, marker)
    assert await markers.wait(agent_id, event_id, timeout=0) == marker
    assert await markers.wait(agent_id, event_id, timeout=30) == marker
    with pytest.raises(TimeoutError):
        await markers.wait(agent_id, new_id(START), timeout=0)
