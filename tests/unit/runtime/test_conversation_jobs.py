"""Conversation jobs through the real runtime (DBOS, SQLite, gateway): a conversation is
consolidated once whoever enqueues its close hooks, and a failed consolidation is retried
until it succeeds, reported by `persyn doctor` meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.ops.doctor.checks import check_consolidation
from persyn.runtime.app import Runtime
from persyn.schedule import at_trigger, set_reminder
from persyn.store.capabilities import FullStore, require_capability
from persyn.store.ports.jobs import ConsolidationStatus
from persyn.testing import Pilot, run_runtime
from persyn.testing.models import DoubleReply, registered_double

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(START))
_SCORES = ("emotional_significance", "decisions", "novelty", "continuing_themes", "explicit_importance")


class Mind:
    """Answers a reminder run and its consolidation; counts the consolidation's summaries.
    `held` keeps summaries waiting (a consolidation in flight); `failures` makes the next
    ones fail like a provider refusing the request."""

    def __init__(self) -> None:
        self.summaries = 0
        self.failures = 0
        self.held = asyncio.Event()
        self.held.set()

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "respond":
            return DoubleReply(text="Time to stretch, Sam!")
        if task == "summarize":
            self.summaries += 1
            await self.held.wait()
            if self.failures:
                self.failures -= 1
                raise ModelHTTPError(status_code=400, model_name="mind", body="the provider said no")
            return DoubleReply(output={"summary": "My reminder fired and I told Sam to stretch.", "tags": []})
        if task == "rate":
            return DoubleReply(
                output={**dict.fromkeys(_SCORES, 3), "importance": 4, "sensitivity": "private"}
            )
        return DoubleReply(text="ok")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("jobs-mind", instance):
        yield instance


_CONFIG = "[deliberation]\nenabled = false\n[graph]\nenabled = false\n[autonomy]\nheartbeat_minutes = 1440\n"


def _runtime(tmp_path: Path) -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(tmp_path / "home", model="test:jobs-mind", agent=AGENT, config=_CONFIG)


async def _fire_a_reminder(runtime: Runtime) -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    await set_reminder(
        require_capability(runtime.store, FullStore),
        AGENT.id,
        "remind Sam to stretch",
        at_trigger(START + timedelta(minutes=5), START),
        START,
    )
    clock.advance(timedelta(minutes=6))
    assert await runtime.autonomy.fire_due() == 1


async def _reflections(runtime: Runtime) -> list[str]:
    return [
        c.id
        for c in await require_capability(runtime.store, FullStore).list_conversations(AGENT.id, limit=10)
        if c.closed_at is not None
    ]


async def _memories(runtime: Runtime) -> list[str]:
    return [
        r.summary
        for r in await require_capability(runtime.store, FullStore).list_records(AGENT.id)
        if r.kind == "reminder"
    ]


async def _close_hook_runs() -> list[Any]:
    return await DBOS.list_workflows_async(name=["persyn.conversation_closed", "persyn.consolidation_retry"])


async def test_a_run_closed_by_its_workflow_then_swept_is_consolidated_once(
    tmp_path: Path, mind: Mind
) -> None:
    """The reminder's workflow closes its conversation and enqueues the close hooks; the
    sweep finds it unconsolidated (the consolidation is still in flight, as after a kill
    between close and consolidation) and enqueues them again: the same workflow, one
    consolidation, one bill."""
    mind.held.clear()
    async with _runtime(tmp_path) as pilot:
        runtime = pilot.runtime
        await _fire_a_reminder(runtime)

        async def summarising() -> bool:
            return mind.summaries == 1

        await pilot.wait_for(summarising)  # the run is over, its consolidation under way
        clock = runtime.clock
        assert isinstance(clock, ManualClock)
        clock.advance(timedelta(minutes=5))
        assert await runtime.housekeeping.sweep_unconsolidated() == 1

        async def every_run_summarising() -> bool:
            return mind.summaries == len(await _close_hook_runs())

        await pilot.wait_for(every_run_summarising)
        mind.held.set()

        async def all_done() -> bool:
            runs = await _close_hook_runs()
            return bool(runs) and all(run.status == "SUCCESS" for run in runs)

        await pilot.wait_for(all_done)
        assert len(await _close_hook_runs()) == 1
        assert mind.summaries == 1
        assert await _memories(runtime) == ["My reminder fired and I told Sam to stretch."]
        assert await runtime.housekeeping.sweep_unconsolidated() == 0


async def test_a_failed_consolidation_is_retried_until_it_succeeds_and_doctor_reports_it(
    tmp_path: Path, mind: Mind
) -> None:
    mind.failures = 2
    async with _runtime(tmp_path) as pilot:
        runtime = pilot.runtime
        clock = runtime.clock
        assert isinstance(clock, ManualClock)
        await _fire_a_reminder(runtime)

        async def closed() -> bool:
            return bool(await _reflections(runtime))

        await pilot.wait_for(closed)
        (conversation_id,) = await _reflections(runtime)

        async def failed(attempts: int) -> bool:
            state = await require_capability(runtime.store, FullStore).get_consolidation(
                AGENT.id, conversation_id
            )
            return (
                state is not None
                and state.status is ConsolidationStatus.FAILED
                and state.attempts == attempts
            )

        await pilot.wait_for(lambda: failed(1))
        first_failure = clock.now()
        check = await check_consolidation(runtime.settings)
        assert check.ok and check.warning
        assert "1 conversation(s) failing to consolidate" in check.detail
        assert "the provider said no" in check.detail
        assert f"next attempt {(first_failure + timedelta(minutes=2)).isoformat()}" in check.detail

        clock.advance(timedelta(minutes=1))
        assert await runtime.housekeeping.sweep_unconsolidated() == 0  # not due yet
        clock.advance(timedelta(minutes=2))
        assert await runtime.housekeeping.sweep_unconsolidated() == 1  # the first retry: fails again
        await pilot.wait_for(lambda: failed(2))
        assert "attempt 2" in (await check_consolidation(runtime.settings)).detail
        clock.advance(timedelta(minutes=3))
        assert await runtime.housekeeping.sweep_unconsolidated() == 0  # backing off: 4 minutes now
        clock.advance(timedelta(minutes=2))
        assert await runtime.housekeeping.sweep_unconsolidated() == 1

        async def done() -> bool:
            state = await require_capability(runtime.store, FullStore).get_consolidation(
                AGENT.id, conversation_id
            )
            return state is not None and state.status is ConsolidationStatus.DONE

        await pilot.wait_for(done)
        assert await _memories(runtime) == ["My reminder fired and I told Sam to stretch."]
        assert mind.summaries == 3
        clock.advance(timedelta(hours=12))
        assert await runtime.housekeeping.sweep_unconsolidated() == 0
        check = await check_consolidation(runtime.settings)
        assert not check.warning and check.detail == "no conversation is waiting for a retry"
