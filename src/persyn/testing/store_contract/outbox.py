"""The outbox (ARCHITECTURE §3, turn 2), as every store must keep it: idempotent writes,
pending rows per agent and service in the order written, delivery marked once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from persyn.core.ids import derived_id, new_id
from persyn.store.capabilities import FullStore
from persyn.store.ports.outbox import OutboxRow
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
AGENT = new_id(T0)
OTHER = new_id(T0)


def _row(
    key: str, at: datetime, *, agent_id: str = AGENT, service: str = "terminal", text: str = "hi"
) -> OutboxRow:
    return OutboxRow(
        id=derived_id(at, key),
        agent_id=agent_id,
        service=service,
        channel=service,
        conversation_id=new_id(at),
        message_id=new_id(at),
        event_id=new_id(at),
        text=text,
        created_at=at,
    )


class OutboxContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_a_row_written_twice_is_stored_once_and_keeps_what_was_first_written(
        self, store: FullStore
    ) -> None:
        first = await store.put_outbox(_row("reply:1", T0, text="first"))
        again = await store.put_outbox(_row("reply:1", T0, text="second"))
        assert again == first and again.text == "first"
        assert [r.id for r in await store.pending_outbox(AGENT, "terminal")] == [first.id]

    async def test_pending_rows_are_per_agent_and_service_in_the_order_written(
        self, store: FullStore
    ) -> None:
        late = await store.put_outbox(_row("b", T0 + timedelta(minutes=2)))
        early = await store.put_outbox(_row("a", T0 + timedelta(minutes=1)))
        await store.put_outbox(_row("c", T0, agent_id=OTHER))
        await store.put_outbox(_row("d", T0, service="matrix"))
        assert [r.id for r in await store.pending_outbox(AGENT, "terminal")] == [early.id, late.id]
        assert [r.id for r in await store.pending_outbox(AGENT, "terminal", limit=1)] == [early.id]
        assert await store.pending_outbox(AGENT, "web") == []

    async def test_a_row_is_marked_delivered_once_and_leaves_the_pending_list(self, store: FullStore) -> None:
        row = await store.put_outbox(_row("reply:2", T0))
        later = T0 + timedelta(seconds=5)
        assert await store.mark_outbox_delivered(AGENT, row.id, later) is True
        assert await store.mark_outbox_delivered(AGENT, row.id, later) is False  # a racing deliverer
        assert await store.mark_outbox_delivered(OTHER, row.id, later) is False  # another agent's
        assert await store.pending_outbox(AGENT, "terminal") == []
        stored = await store.get_outbox(AGENT, row.id)
        assert stored is not None and stored.delivered_at == later
        assert await store.get_outbox(OTHER, row.id) is None
        # Rewriting a delivered row (a replayed transmit) does not make it pending again.
        assert (await store.put_outbox(_row("reply:2", T0))).delivered_at == later

    async def test_a_failed_delivery_is_counted_and_the_row_stays_pending(self, store: FullStore) -> None:
        row = await store.put_outbox(_row("reply:3", T0))
        await store.outbox_failed(AGENT, row.id, "terminal gone")
        await store.outbox_failed(AGENT, row.id, "terminal gone again")
        [pending] = await store.pending_outbox(AGENT, "terminal")
        assert (pending.attempts, pending.last_error) == (2, "terminal gone again")

    async def test_purge_drops_rows_written_before_the_cutoff(self, store: FullStore) -> None:
        old = await store.put_outbox(_row("old", T0))
        new = await store.put_outbox(_row("new", T0 + timedelta(days=40)))
        assert await store.purge_outbox(T0 + timedelta(days=30)) == 1
        assert await store.get_outbox(AGENT, old.id) is None
        assert await store.get_outbox(AGENT, new.id) is not None

    def test_rows_refuse_ids_that_are_not_canonical_ulids(self) -> None:
        row = _row("x", T0)
        with pytest.raises(ValidationError, match="outbox id"):
            OutboxRow.model_validate({**row.model_dump(), "message_id": "not-an-id"})
        with pytest.raises(ValidationError, match="not canonical"):
            OutboxRow.model_validate({**row.model_dump(), "id": row.id.lower()})
        with pytest.raises(ValidationError):
            OutboxRow.model_validate({**row.model_dump(), "service": ""})
