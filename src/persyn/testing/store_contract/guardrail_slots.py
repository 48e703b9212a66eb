"""Guardrail evaluation once per period across processes (SPEC §4.10): the store's slot claim
is won by exactly one caller, and two `Guardrails` — as a `persyn serve` and a `persyn worker`
on one store would run them, each with its own store connection — evaluating the same period
record one trigger and write one notice, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, GuardrailConfig, Settings
from persyn.core.config.safety import SafetyConfig
from persyn.core.ids import new_id
from persyn.gateway.gateway import ModelGateway
from persyn.runtime.background.guardrails import Guardrails
from persyn.runtime.delivery.outbox import Outbox
from persyn.store.base import Message, Role
from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract, StoreFactory, full

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
AGENT = new_id(T0)
OTHER = new_id(T0 + timedelta(seconds=1))
ADA = AgentConfig(name="Ada", id=AGENT)


def _guardrails(store: FullStore, clock: ManualClock, tmp_path: Path) -> Guardrails:
    spam = GuardrailConfig(
        name="spam",
        detector="outbound_messages",
        window_minutes=30,
        threshold=3,
        actions=["notify", "block"],
        block_minutes=60,
    )
    settings = Settings(
        home=tmp_path,
        agents=[ADA],
        safety=SafetyConfig(builtin=False, evaluate_seconds=120),
        guardrails=[spam],
    )

    def no_model(agent_id: str) -> ModelGateway:
        raise AssertionError(f"a rule needs no model (agent {agent_id!r})")

    return Guardrails(
        settings,
        store=store,
        clock=clock,
        agents={AGENT: ADA},
        gateway=no_model,
        outbox=Outbox(store, clock, lambda service: None),
    )


class GuardrailSlotsContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    @pytest.fixture
    async def second_store(self, store: FullStore, store_factory: StoreFactory) -> AsyncIterator[FullStore]:
        """Another connection to the same database, as another process has."""
        opened = full(store_factory())
        await opened.setup()
        try:
            yield opened
        finally:
            await opened.close()

    async def test_a_slot_is_claimed_by_exactly_one_caller_across_stores_and_purged_with_the_checks(
        self, store: FullStore, second_store: FullStore
    ) -> None:
        racing = [store, second_store] * 4
        claims = await asyncio.gather(
            *(s.claim_guardrail_slot(AGENT, "spam", T0, f"host:{n}", T0) for n, s in enumerate(racing))
        )
        assert sorted(claims) == [False] * 7 + [True]
        assert not await store.claim_guardrail_slot(AGENT, "spam", T0, "late", T0 + timedelta(minutes=1))
        later = T0 + timedelta(minutes=2)
        assert await second_store.claim_guardrail_slot(
            AGENT, "spam", later, "host:1", later
        )  # the next period
        assert await store.claim_guardrail_slot(AGENT, "loop", T0, "host:0", T0)  # another pattern
        assert await store.claim_guardrail_slot(OTHER, "spam", T0, "host:0", T0)  # another agent

        await second_store.purge_guardrail_checks(T0 + timedelta(minutes=1))  # claims made before it go
        assert await store.claim_guardrail_slot(AGENT, "spam", T0, "again", T0 + timedelta(minutes=1))
        assert not await store.claim_guardrail_slot(AGENT, "spam", later, "again", later)  # kept

    async def test_two_processes_evaluating_one_period_record_and_notify_one_trigger(
        self, store: FullStore, second_store: FullStore, tmp_path: Path
    ) -> None:
        await store.ensure_agent(AGENT, "Ada", T0)
        conversation = await store.open_conversation(AGENT, "irc", "#a", [], T0, 3600)
        for n in range(3):  # three replies within the window: the spike
            at = T0 + timedelta(minutes=n)
            await store.add_message(
                Message(
                    id=new_id(at),
                    agent_id=AGENT,
                    conversation_id=conversation.id,
                    role=Role.AGENT,
                    person_id=None,
                    speaker_name="Ada",
                    text=f"reply {n}",
                    created_at=at,
                    event_id=None,
                )
            )
        clock = ManualClock(T0 + timedelta(minutes=5))
        serve, worker = (
            _guardrails(store, clock, tmp_path / "a"),
            _guardrails(second_store, clock, tmp_path / "b"),
        )

        first, second = await asyncio.gather(serve.evaluate(), worker.evaluate())
        (event,) = first + second
        assert (event.guardrail, event.subject_kind, event.subject) == ("spam", "channel", "irc:#a")
        assert await store.guardrail_events(AGENT) == [event]
        notices = await store.pending_outbox(AGENT, "terminal")  # [safety] notify_channel's service
        assert [row.text.split(":")[0] for row in notices] == ["Guardrail 'spam' triggered (irc"]

        # Later in the same period, neither evaluates again; in the next one the block in force
        # means the same spike is not acted on twice.
        clock.advance(timedelta(seconds=30))
        assert await asyncio.gather(worker.evaluate(), serve.evaluate()) == [[], []]
        clock.advance(timedelta(minutes=2))
        assert await asyncio.gather(worker.evaluate(), serve.evaluate()) == [[], []]
        assert await second_store.guardrail_events(AGENT) == [event]
        assert len(await store.pending_outbox(AGENT, "terminal")) == 1
