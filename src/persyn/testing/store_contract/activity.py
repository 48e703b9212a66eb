"""The activity log and deliberation traces (the activity and events sub-ports), on every backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.store.base import Provenance
from persyn.store.capabilities import FullStore
from persyn.store.ports.activity import UNATTRIBUTED_RUN, ActivityEntry
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 3, 2, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _run(agent_id: str, at: datetime, **fields: object) -> ActivityEntry:
    values: dict[str, object] = {
        "id": new_id(at), "agent_id": agent_id, "at": at, "kind": "heartbeat", "reminder_id": "",
        "objective": "beat", "outcome": "rested", "tokens": 10,
    }  # fmt: skip
    return ActivityEntry.model_validate(values | fields)


class ActivityContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_runs_come_back_newest_first_with_everything_they_were_logged_with(
        self, store: FullStore
    ) -> None:
        agent_id, other = new_id(), new_id()
        reminder_id, conversation_id = new_id(), new_id()
        where = Provenance(channel="discord:dm", participant_ids=(new_id(),), sensitivity=Sensitivity.PRIVATE)
        full = _run(
            agent_id,
            T0,
            kind="reminder",
            reminder_id=reminder_id,
            conversation_id=conversation_id,
            provenance=where,
        )
        for entry in (_run(agent_id, T0 - 2 * MINUTE), full, _run(agent_id, T0 - MINUTE), _run(other, T0)):
            await store.add_activity(entry)
        runs = await store.recent_activity(agent_id, limit=10)
        assert runs[0] == full and [r.at for r in runs] == [T0, T0 - MINUTE, T0 - 2 * MINUTE]
        assert runs[1].provenance == UNATTRIBUTED_RUN and runs[1].conversation_id is None
        assert [r.at for r in await store.recent_activity(agent_id, limit=2)] == [T0, T0 - MINUTE]
        assert await store.recent_activity(agent_id, limit=10, kind="reminder") == [full]
        assert await store.recent_activity(agent_id, limit=10, reminder_id=reminder_id) == [full]
        assert len(await store.recent_activity(agent_id, limit=10, since=T0 - MINUTE)) == 2
        assert await store.recent_activity(agent_id, limit=0) == []

    async def test_logging_a_run_again_replaces_it(self, store: FullStore) -> None:
        agent_id = new_id()
        entry = _run(agent_id, T0)
        await store.add_activity(entry)
        await store.add_activity(entry.model_copy(update={"outcome": "said: hello", "tokens": 30}))
        (stored,) = await store.recent_activity(agent_id, limit=10)
        assert (stored.outcome, stored.tokens) == ("said: hello", 30)

    async def test_the_token_window_is_half_open_and_per_agent(self, store: FullStore) -> None:
        agent_id = new_id()
        for minutes in (0, 10, 20, 30):
            await store.add_activity(_run(agent_id, T0 - minutes * MINUTE))
        await store.add_activity(_run(new_id(), T0))
        assert await store.activity_tokens(agent_id, T0 - 20 * MINUTE, T0) == 20  # (T0-20, T0]
        assert await store.activity_tokens(agent_id, T0, T0 + MINUTE) == 0
        assert await store.purge_activity(agent_id, T0 - 10 * MINUTE) == 2
        assert [r.at for r in await store.recent_activity(agent_id, limit=10)] == [T0, T0 - 10 * MINUTE]

    async def test_a_run_with_a_bad_id_is_refused(self, store: FullStore) -> None:
        with pytest.raises(InputError, match="run id"):
            await store.add_activity(_run(new_id(), T0, id="run-1"))
        with pytest.raises(InputError, match="agent id"):
            await store.add_activity(_run("ada", T0))

    async def test_deliberation_traces_merge_by_key_per_event(self, store: FullStore) -> None:
        agent_id, event_id, other_event = new_id(), new_id(), new_id()
        await store.merge_deliberation(
            agent_id, event_id, {"mode": "deferred", "critiques": [{"lens": "x"}]}, T0
        )
        await store.merge_deliberation(agent_id, event_id, {"decision": {"action": "speak"}}, T0 + MINUTE)
        await store.merge_deliberation(agent_id, event_id, {"mode": "inline"}, T0 + 2 * MINUTE)
        (trace,) = await store.deliberation_traces(agent_id, [event_id, other_event, event_id])
        assert trace.event_id == event_id and trace.updated_at == T0 + 2 * MINUTE
        assert trace.trace == {
            "mode": "inline",
            "critiques": [{"lens": "x"}],
            "decision": {"action": "speak"},
        }
        assert await store.deliberation_traces(new_id(), [event_id]) == []  # another agent's
        assert await store.deliberation_traces(agent_id, []) == []
        with pytest.raises(InputError, match="event id"):
            await store.merge_deliberation(agent_id, "evt-1", {"mode": "inline"}, T0)
