"""The `JobsPort` sub-port on every backend: consolidation state and extraction watermarks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.store.capabilities import FullStore
from persyn.store.ports.jobs import MAX_ERROR_CHARS, Consolidation, ConsolidationStatus, Watermark
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _failed(agent_id: str, conversation_id: str, attempts: int, retry_at: datetime) -> Consolidation:
    return Consolidation(
        agent_id=agent_id,
        conversation_id=conversation_id,
        status=ConsolidationStatus.FAILED,
        attempts=attempts,
        next_attempt_at=retry_at,
        last_error=f"ModelError: attempt {attempts}",
        updated_at=retry_at - timedelta(minutes=2),
    )


class JobsContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_a_consolidation_moves_from_pending_through_failed_to_done(self, store: FullStore) -> None:
        agent_id, conversation_id = new_id(T0), new_id(T0)
        assert await store.get_consolidation(agent_id, conversation_id) is None
        assert await store.consolidation_pending(agent_id, conversation_id, T0)
        assert not await store.consolidation_pending(agent_id, conversation_id, T0)  # it has a state
        pending = await store.get_consolidation(agent_id, conversation_id)
        assert pending is not None and (pending.status, pending.attempts) == (ConsolidationStatus.PENDING, 0)

        await store.set_consolidation(_failed(agent_id, conversation_id, 1, T0 + timedelta(minutes=2)))
        assert not await store.consolidation_pending(agent_id, conversation_id, T0)  # a failure stays
        failed = await store.get_consolidation(agent_id, conversation_id)
        assert failed == _failed(agent_id, conversation_id, 1, T0 + timedelta(minutes=2))

        done = Consolidation(
            agent_id=agent_id,
            conversation_id=conversation_id,
            status=ConsolidationStatus.DONE,
            attempts=1,
            detail="stored",
            updated_at=T0 + timedelta(minutes=3),
        )
        await store.set_consolidation(done)
        assert await store.get_consolidation(agent_id, conversation_id) == done
        assert await store.get_consolidation(new_id(T0), conversation_id) is None  # per agent

    async def test_failed_consolidations_are_listed_across_agents_and_by_when_they_are_due(
        self, store: FullStore
    ) -> None:
        first, second = new_id(T0), new_id(T0)
        soon, later, done = new_id(T0), new_id(T0), new_id(T0)
        await store.set_consolidation(_failed(first, soon, 1, T0 + timedelta(minutes=2)))
        await store.set_consolidation(_failed(second, later, 3, T0 + timedelta(hours=1)))
        await store.set_consolidation(
            Consolidation(
                agent_id=first, conversation_id=done, status=ConsolidationStatus.DONE, updated_at=T0
            )
        )
        failing = await store.consolidations(ConsolidationStatus.FAILED)
        assert [(s.agent_id, s.conversation_id) for s in failing] == [(first, soon), (second, later)]
        due = await store.consolidations(ConsolidationStatus.FAILED, due_by=T0 + timedelta(minutes=5))
        assert [s.conversation_id for s in due] == [soon]
        assert await store.consolidations(ConsolidationStatus.FAILED, due_by=T0) == []
        assert [s.conversation_id for s in await store.consolidations(ConsolidationStatus.DONE)] == [done]
        assert len(await store.consolidations(ConsolidationStatus.FAILED, limit=1)) == 1

    def test_consolidation_rows_validate_what_they_hold(self) -> None:
        agent_id = new_id(T0)
        with pytest.raises(InputError, match="not canonical"):
            Consolidation(
                agent_id=agent_id.lower(),
                conversation_id=new_id(T0),
                status=ConsolidationStatus.DONE,
                updated_at=T0,
            )
        with pytest.raises(InputError, match="invalid id"):
            Consolidation(
                agent_id=agent_id, conversation_id="nope", status=ConsolidationStatus.DONE, updated_at=T0
            )
        with pytest.raises(InputError, match="next attempt"):
            Consolidation(
                agent_id=agent_id,
                conversation_id=new_id(T0),
                status=ConsolidationStatus.FAILED,
                updated_at=T0,
            )
        long = _failed(agent_id, new_id(T0), 1, T0).model_copy(update={"last_error": "x" * 10_000})
        assert len(Consolidation.model_validate(long.model_dump()).last_error or "") == MAX_ERROR_CHARS

    async def test_each_reader_keeps_its_own_watermark_per_conversation(self, store: FullStore) -> None:
        agent_id, conversation_id, other = new_id(T0), new_id(T0), new_id(T0)
        first, second = new_id(T0), new_id(T0 + timedelta(seconds=1))
        assert await store.get_watermark(agent_id, conversation_id, "graph") is None
        await store.set_watermark(
            Watermark(
                agent_id=agent_id,
                conversation_id=conversation_id,
                reader="graph",
                message_id=first,
                updated_at=T0,
            )
        )
        await store.set_watermark(
            Watermark(
                agent_id=agent_id,
                conversation_id=conversation_id,
                reader="graph",
                message_id=second,
                updated_at=T0,
            )
        )
        await store.set_watermark(
            Watermark(
                agent_id=agent_id,
                conversation_id=conversation_id,
                reader="observe",
                message_id=first,
                updated_at=T0,
            )
        )
        assert await store.get_watermark(agent_id, conversation_id, "graph") == second
        assert await store.get_watermark(agent_id, conversation_id, "observe") == first
        assert await store.get_watermark(agent_id, other, "graph") is None
        assert await store.get_watermark(new_id(T0), conversation_id, "graph") is None
        with pytest.raises(ValueError, match="reader"):
            Watermark(
                agent_id=agent_id,
                conversation_id=conversation_id,
                reader="Graph Reader",
                message_id=first,
                updated_at=T0,
            )
