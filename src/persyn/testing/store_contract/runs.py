"""The runs sub-port on every backend: run state by compare-and-set, what caused a run's
conversation, the per-channel ledgers over a rolling window, and the purge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError, ToolError
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.store.base import Provenance
from persyn.store.capabilities import FullStore
from persyn.store.ports.runs import RunConversation, RunState, SpendKind
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


class RunsContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_a_run_state_is_changed_in_one_step_and_a_refused_change_writes_nothing(
        self, store: FullStore
    ) -> None:
        agent_id, run_id = new_id(T0), new_id(T0)
        assert await store.get_run(agent_id, run_id) is None

        def add(state: RunState) -> RunState:
            return state.model_copy(update={"tokens": state.tokens + 10, "sends": (*state.sends, "call-1")})

        await store.update_run(agent_id, run_id, add, T0)
        state = await store.update_run(agent_id, run_id, add, T0 + timedelta(minutes=1))
        assert (state.tokens, state.sends, state.updated_at) == (
            20,
            ("call-1", "call-1"),
            T0 + timedelta(minutes=1),
        )

        def refuse(state: RunState) -> RunState:
            raise ToolError("message cap reached")

        with pytest.raises(ToolError, match="message cap reached"):
            await store.update_run(agent_id, run_id, refuse, T0 + timedelta(minutes=2))
        provenance = Provenance(
            channel="discord:dm-ann", participant_ids=(new_id(T0),), sensitivity=Sensitivity.PRIVATE
        )

        def place(state: RunState) -> RunState:
            return state.model_copy(update={"provenance": provenance, "stopped": "stopped: budget"})

        await store.update_run(agent_id, run_id, place, T0 + timedelta(minutes=3))
        stored = await store.get_run(agent_id, run_id)
        assert stored is not None
        assert (stored.tokens, stored.provenance, stored.stopped) == (20, provenance, "stopped: budget")
        assert await store.get_run(new_id(T0), run_id) is None  # another agent's namespace
        with pytest.raises(InputError, match="invalid run id"):
            await store.update_run(agent_id, "run-1", add, T0)

    async def test_what_caused_a_conversation_is_kept_per_conversation(self, store: FullStore) -> None:
        agent_id, talk, run_id, reminder = new_id(T0), new_id(T0), new_id(T0), new_id(T0)
        row = RunConversation(
            agent_id=agent_id, conversation_id=talk, run_id=run_id, kind="reminder", reminder_id=reminder,
            sensitivity=Sensitivity.PRIVATE, created_at=T0,
        )  # fmt: skip
        await store.set_run_conversation(row)
        await store.set_run_conversation(row)  # a replayed finish: the same row
        assert await store.get_run_conversation(agent_id, talk) == row
        assert await store.get_run_conversation(agent_id, new_id(T0)) is None

    async def test_a_channel_ledger_sums_a_rolling_window_refuses_past_its_limit_and_counts_a_key_once(
        self,
        store: FullStore,
    ) -> None:
        agent_id = new_id(T0)
        now = T0 + timedelta(hours=30)

        async def spend(key: str, tokens: int, at: datetime, limit: int | None = None) -> tuple[int, bool]:
            outcome = await store.spend_channel(
                agent_id, SpendKind.SENT, "discord", "dm-ann", key, tokens, at, since=at - DAY, limit=limit
            )
            return outcome.used, outcome.recorded

        assert await spend("a", 50, T0) == (0, True)  # outside the window by `now`
        assert await spend("b", 30, now - timedelta(hours=1), limit=100) == (0, True)
        assert await spend("c", 80, now, limit=100) == (30, False)  # 30 + 80 would pass 100
        assert await spend("b", 30, now, limit=100) == (30, True)  # the same entry again: counted once
        assert await spend("d", 70, now, limit=100) == (30, True)
        assert await store.channel_spent(agent_id, SpendKind.SENT, "discord", "dm-ann", now - DAY) == 100
        assert await store.channel_spent(agent_id, SpendKind.REPLIED, "discord", "dm-ann", now - DAY) == 0
        assert await store.channel_spent(agent_id, SpendKind.SENT, "discord", "dm-bob", now - DAY) == 0

    async def test_the_purge_drops_what_is_older_than_the_keeping_time(self, store: FullStore) -> None:
        agent_id, old_run, new_run, talk = new_id(T0), new_id(T0), new_id(T0), new_id(T0)
        later = T0 + timedelta(days=40)
        await store.update_run(agent_id, old_run, lambda s: s, T0)
        await store.update_run(agent_id, new_run, lambda s: s, later)
        await store.set_run_conversation(
            RunConversation(
                agent_id=agent_id, conversation_id=talk, run_id=old_run, kind="heartbeat",
                sensitivity=Sensitivity.PUBLIC, created_at=T0,
            )
        )  # fmt: skip
        for key, at in (("old", T0), ("new", later)):
            await store.spend_channel(
                agent_id, SpendKind.REPLIED, "discord", "dm-ann", key, 5, at, since=at - DAY
            )
        assert await store.purge_runs(later - timedelta(days=30)) == 3
        assert await store.get_run(agent_id, old_run) is None
        assert await store.get_run(agent_id, new_run) is not None
        assert await store.get_run_conversation(agent_id, talk) is None
        assert await store.channel_spent(agent_id, SpendKind.REPLIED, "discord", "dm-ann", T0 - DAY) == 5
        assert await store.purge_runs(later - timedelta(days=30)) == 0
