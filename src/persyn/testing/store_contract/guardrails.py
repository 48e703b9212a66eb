"""Guardrail events and checks, the interaction window, and emotional-state readings
(`store/ports/guardrails.py`, `store/ports/emotions.py`), as every store must keep them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from persyn.core.ids import new_id
from persyn.store.base import Identity, Message, Role
from persyn.store.capabilities import FullStore
from persyn.store.ports.emotions import EmotionReading
from persyn.store.ports.guardrails import GuardrailCheck, GuardrailEvent
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
AGENT = new_id(T0)
OTHER = new_id(T0 + timedelta(seconds=1))


def _event(at: datetime, *, agent: str = AGENT, blocked_for: timedelta | None = None) -> GuardrailEvent:
    return GuardrailEvent(
        id=new_id(at),
        agent_id=agent,
        guardrail="escalating-conflict",
        subject_kind="person",
        subject="P",
        reason="insults growing over three conversations",
        score=0.9,
        actions=("notify", "block"),
        detected_at=at,
        blocked_until=None if blocked_for is None else at + blocked_for,
    )


class GuardrailsContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_events_are_kept_once_newest_first_and_blocks_end_when_due_or_lifted(
        self, store: FullStore
    ) -> None:
        first = _event(T0, blocked_for=timedelta(hours=1))
        assert await store.add_guardrail_event(first)
        assert not await store.add_guardrail_event(first.model_copy(update={"reason": "replayed"}))
        second = _event(T0 + timedelta(minutes=5))  # notify only: no block
        elsewhere = _event(T0 + timedelta(minutes=6), agent=OTHER, blocked_for=timedelta(hours=2))
        await store.add_guardrail_event(second)
        await store.add_guardrail_event(elsewhere)

        assert await store.guardrail_events(AGENT) == [second, first]  # the first write stays
        assert [e.id for e in await store.guardrail_events(None)] == [elsewhere.id, second.id, first.id]
        assert await store.guardrail_events(AGENT, since=T0 + timedelta(minutes=1)) == [second]
        assert await store.guardrail_blocks(AGENT, T0 + timedelta(minutes=30)) == [first]
        assert await store.guardrail_blocks(AGENT, T0 + timedelta(hours=1)) == []  # due
        assert len(await store.guardrail_blocks(None, T0 + timedelta(minutes=30))) == 2

        lifted = await store.lift_guardrail_block(first.id, T0 + timedelta(minutes=10))
        assert lifted is not None and lifted.lifted_at == T0 + timedelta(minutes=10)
        again = await store.lift_guardrail_block(first.id, T0 + timedelta(minutes=20))
        assert again is not None and again.lifted_at == T0 + timedelta(minutes=10)  # the first lift stays
        assert await store.guardrail_blocks(AGENT, T0 + timedelta(minutes=30)) == []
        assert await store.lift_guardrail_block(new_id(T0), T0) is None

    async def test_checks_give_the_watermark_and_the_budget_and_are_purged(self, store: FullStore) -> None:
        for minutes, tokens in ((0, 100), (10, 250)):
            await store.add_guardrail_check(
                GuardrailCheck(
                    id=new_id(T0 + timedelta(minutes=minutes)),
                    agent_id=AGENT,
                    guardrail="escalating-conflict",
                    subject="P",
                    window_end=T0 + timedelta(minutes=minutes - 1),
                    checked_at=T0 + timedelta(minutes=minutes),
                    tokens=tokens,
                )
            )
        last = await store.last_guardrail_check(AGENT, "escalating-conflict", "P")
        assert last is not None and last.window_end == T0 + timedelta(minutes=9)
        assert await store.last_guardrail_check(AGENT, "escalating-conflict", "Q") is None
        assert await store.guardrail_tokens(AGENT, T0) == 350
        assert await store.guardrail_tokens(AGENT, T0 + timedelta(minutes=5)) == 250
        assert await store.guardrail_tokens(OTHER, T0) == 0
        assert await store.purge_guardrail_checks(T0 + timedelta(minutes=5)) == 1
        assert await store.guardrail_tokens(AGENT, T0) == 250

    async def test_the_interaction_window_spans_conversations_oldest_first(self, store: FullStore) -> None:
        await store.ensure_agent(AGENT, "Ada", T0)
        sam = await store.resolve_person(
            AGENT, Identity(service="irc", channel="irc", speaker_id="sam"), "Sam", "human", T0
        )
        said: list[str] = []
        for n, channel in enumerate(("#a", "#b", "#a")):
            at = T0 + timedelta(hours=n)
            conversation = await store.open_conversation(AGENT, "irc", channel, [sam.id], at, 60)
            message = Message(
                id=new_id(at),
                agent_id=AGENT,
                conversation_id=conversation.id,
                role=Role.USER,
                person_id=sam.id,
                speaker_name="Sam",
                text=f"message {n}",
                created_at=at,
                event_id=None,
            )
            await store.add_message(message)
            said.append(message.id)
        window = await store.interaction_window(AGENT, T0 + timedelta(minutes=30))
        assert [(m.id, m.channel, m.person_id, m.text) for m in window] == [
            (said[1], "#b", sam.id, "message 1"),
            (said[2], "#a", sam.id, "message 2"),
        ]
        assert len({m.conversation_id for m in window}) == 2
        latest = await store.interaction_window(AGENT, T0, limit=1)
        assert [m.id for m in latest] == [said[2]]
        assert await store.interaction_window(OTHER, T0) == []

    async def test_emotion_readings_by_exchange_conversation_and_record(self, store: FullStore) -> None:
        conversation, record = new_id(T0), new_id(T0 + timedelta(seconds=2))

        def reading(minutes: int, top: str, **where: str) -> EmotionReading:
            at = T0 + timedelta(minutes=minutes)
            other = "calm" if top != "calm" else "engaged"
            return EmotionReading(
                id=new_id(at),
                agent_id=AGENT,
                created_at=at,
                distribution={top: 0.7, other: 0.3},
                top=top,
                **where,
            )

        early = reading(0, "curious", conversation_id=conversation, event_id=new_id(T0))
        late = reading(
            5, "frustrated", conversation_id=conversation, event_id=new_id(T0 + timedelta(minutes=5))
        )
        kept = reading(9, "frustrated", conversation_id=conversation, record_id=record)
        for r in (early, late, kept):
            assert await store.add_emotion_reading(r)
        assert not await store.add_emotion_reading(early)
        assert await store.recent_emotions(AGENT, 5) == [late, early]  # exchanges only, newest first
        assert await store.recent_emotions(AGENT, 1) == [late]
        assert await store.conversation_emotions(AGENT, conversation) == [early, late]
        assert await store.record_emotions(AGENT, [record, new_id(T0)]) == {record: kept}
        assert await store.record_emotions(AGENT, []) == {}
        assert await store.recent_emotions(OTHER, 5) == []
        assert dict(kept.distribution) == {"frustrated": 0.7, "calm": 0.3}
