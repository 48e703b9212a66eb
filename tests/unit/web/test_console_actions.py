"""The console's operator actions (`ops/operator_actions.py`) on a real SQLite store: each
does what its CLI command does and is recorded in the activity log with the key that did it
(spending no autonomy budget), and a bad request does nothing at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord
from persyn.ops.autonomy import activity, agent_reminders, heartbeat, wake
from persyn.ops.history import opened_capability
from persyn.ops.operator_actions import OPERATOR_ACTIONS, take_action
from persyn.schedule.reminders import set_reminder
from persyn.store.capabilities import MemoryStore, ScheduleStore
from persyn.store.ports.activity import OPERATOR_KIND
from persyn.store.ports.schedule import AtTrigger

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(NOW - timedelta(days=1)))


def _settings(tmp_path: Path) -> Settings:
    return load_settings(tmp_path, environ={}).model_copy(update={"agents": [AGENT]})


async def test_each_action_is_done_and_logged_with_who_did_it(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    clock = ManualClock(NOW)
    record = MemoryRecord(
        id=new_id(NOW - timedelta(hours=1)),
        agent_id=AGENT.id,
        created_at=NOW - timedelta(hours=1),
        channel="terminal:terminal",
        summary="The spare key is under the blue flowerpot.",
    )
    async with opened_capability(settings, MemoryStore) as store:
        await store.ensure_agent(AGENT.id, AGENT.name, NOW)
        assert await store.add_record(record, None, None)
    async with opened_capability(settings, ScheduleStore) as schedule:
        reminder = await set_reminder(
            schedule, AGENT.id, "water the plants", AtTrigger(at=NOW + timedelta(hours=2)), NOW
        )
    await wake(settings, AGENT, NOW)

    done = []
    for action, target in (
        ("forget_memory", record.id),
        ("cancel_reminder", reminder.id),
        ("pause_heartbeat", None),
        ("resume_heartbeat", None),
    ):
        clock.advance(timedelta(minutes=1))
        done.append(await take_action(settings, AGENT, action, target, by="ops", clock=clock))
    assert [d.action for d in done] == list(OPERATOR_ACTIONS)

    async with opened_capability(settings, MemoryStore) as store:
        assert await store.records_by_ids(AGENT.id, [record.id]) == []
    assert [r.id for r in await agent_reminders(settings, AGENT, include_cancelled=False)] == []
    beat = await heartbeat(settings, AGENT, clock.now())
    assert beat.beat is not None  # paused, then resumed

    logged = await activity(settings, AGENT, None, 10)
    assert [e.kind for e in logged] == [OPERATOR_KIND] * 4
    assert [e.objective for e in reversed(logged)] == [
        f"forget memory {record.id}",
        f"cancel reminder {reminder.id}",
        "pause heartbeat",
        "resume heartbeat",
    ]
    assert all(e.outcome.endswith("(by the operator, key 'ops')") for e in logged)
    assert "blue flowerpot" in logged[-1].outcome and "water the plants" in logged[-2].outcome
    assert logged[1].outcome.startswith("paused the heartbeat")
    assert all(e.tokens == 0 for e in logged)  # no autonomy budget spent


async def test_a_bad_request_does_nothing_and_logs_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    clock = ManualClock(NOW)
    await wake(settings, AGENT, NOW)
    for action, target, says in (
        ("reset_everything", None, "unknown action 'reset_everything'"),
        ("forget_memory", None, "needs a target"),
        ("pause_heartbeat", "01J00000000000000000000000", "takes no target"),
        ("forget_memory", new_id(NOW), "memory"),
        ("cancel_reminder", new_id(NOW), "no reminder"),
    ):
        with pytest.raises(InputError, match=says):
            await take_action(settings, AGENT, action, target, by="ops", clock=clock)
    assert await activity(settings, AGENT, None, 10) == []
    assert (await heartbeat(settings, AGENT, NOW)).beat is not None
