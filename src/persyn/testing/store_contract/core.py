"""What every storage backend must do (the `Store` port, ARCHITECTURE §4).

Every test takes the `store` (or `store_factory`) fixture of `base.Contract`, so it runs once
per backend. Times come from fixed instants, never the wall clock.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from persyn.core.errors import InputError, StoreError
from persyn.core.events import Attachment, AttachmentKind, CompletionMarker, Event, Speaker
from persyn.core.ids import derived_id, new_id
from persyn.store import Conversation, Identity, Message, Person, Role
from persyn.store.capabilities import FullStore
from persyn.store.schema.migrations import LATEST_VERSION
from persyn.testing.store_contract.base import Contract, StoreFactory, full

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
HOUR = 3600.0


def _event(agent_id: str, text: str = "hello", at: datetime = T0) -> Event:
    return Event(
        id=new_id(at),
        agent_id=agent_id,
        service="terminal",
        channel="main",
        speaker=Speaker(service="terminal", channel="main", speaker_id="u1", display_name="Ann"),
        text=text,
        received_at=at,
        meta={"source": "test"},
    )


def _identity(speaker_id: str = "u1", channel: str = "main") -> Identity:
    return Identity(service="terminal", channel=channel, speaker_id=speaker_id)


async def _open(
    store: FullStore,
    agent_id: str,
    channel: str = "main",
    at: datetime = T0,
    participants: tuple[str, ...] = (),
) -> Conversation:
    return await store.open_conversation(agent_id, "terminal", channel, participants, at, HOUR)


def _message(
    conversation: Conversation,
    text: str,
    at: datetime = T0,
    *,
    role: Role = Role.USER,
    event_id: str | None = None,
    message_id: str | None = None,
) -> Message:
    return Message(
        id=message_id or new_id(at),
        agent_id=conversation.agent_id,
        conversation_id=conversation.id,
        role=role,
        person_id=None,
        speaker_name="Ann" if role is Role.USER else "Persyn",
        text=text,
        created_at=at,
        event_id=event_id,
    )


async def _say(
    store: FullStore, conversation: Conversation, *texts: str, start: datetime = T0
) -> list[Message]:
    said = [_message(conversation, text, start + timedelta(seconds=i)) for i, text in enumerate(texts)]
    for message in said:
        assert await store.add_message(message)
    return said


class CoreContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    # lifecycle and agents -------------------------------------------------------------------
    async def test_setup_is_idempotent_and_reports_the_latest_version(self, store: FullStore) -> None:
        await store.setup()
        assert await store.schema_version() == LATEST_VERSION

    async def test_a_closed_store_refuses_work(self, store_factory: StoreFactory) -> None:
        closed = full(store_factory())
        await closed.setup()
        await closed.close()
        await closed.close()  # idempotent
        with pytest.raises(StoreError, match="closed"):
            await closed.count_messages(new_id())

    async def test_ensure_agent_creates_once_and_follows_renames(self, store: FullStore) -> None:
        agent_id = new_id()
        first = await store.ensure_agent(agent_id, "Anna", T0)
        again = await store.ensure_agent(agent_id, "Anna II", T0 + timedelta(days=1))
        assert (again.id, again.name, again.created_at) == (agent_id, "Anna II", first.created_at)
        other = await store.ensure_agent(new_id(), "Bob", T0 + timedelta(days=2))
        assert await store.list_agents() == [again, other]

    async def test_non_ulid_ids_are_rejected_before_anything_is_stored(self, store: FullStore) -> None:
        with pytest.raises(InputError, match="not-an-id"):
            await store.ensure_agent("not-an-id", "Anna", T0)
        event = _event(new_id()).model_copy(update={"id": "evt-1"})
        with pytest.raises(InputError, match="evt-1"):
            await store.save_event(event)
        assert await store.list_agents() == []

    @pytest.mark.parametrize(
        ("field", "bad", "complaint"),
        [
            ("id", "m-1", "invalid message id 'm-1'"),
            ("conversation_id", "room-1", "invalid conversation id 'room-1'"),
            ("person_id", "sam", "invalid person id 'sam'"),
            ("event_id", derived_id(T0, "a lowercase event id").lower(), "event id .* is not canonical"),
        ],
    )
    async def test_a_message_with_a_bad_id_never_reaches_a_backend(
        self, store: FullStore, field: str, bad: str, complaint: str
    ) -> None:
        """The row type checks its ids as it is built, the same for every backend: a message
        with a bad id cannot be made, so nothing of it is stored."""
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        good = _message(conversation, "hello").model_dump()
        with pytest.raises(InputError, match=complaint):
            Message.model_validate(good | {field: bad})  # refused here, not in an adapter
        assert await store.count_messages(agent_id) == 0

    async def test_conversations_and_persons_with_bad_ids_cannot_be_built(self) -> None:
        """As they would be handed to a backend by an import or a merge."""
        agent_id = new_id()
        with pytest.raises(InputError, match="invalid participant id 'ann'"):
            Conversation(
                id=new_id(), agent_id=agent_id, service="terminal", channel="main", participant_ids=("ann",),
                started_at=T0, last_activity_at=T0, closed_at=T0,
            )  # fmt: skip
        with pytest.raises(InputError, match="invalid conversation id 'c1'"):
            Conversation(
                id="c1", agent_id=agent_id, service="terminal", channel="main", participant_ids=(),
                started_at=T0, last_activity_at=T0, closed_at=T0,
            )  # fmt: skip
        with pytest.raises(InputError, match="invalid person id 'bob'"):
            Person(
                id="bob", agent_id=agent_id, display_name="Bob", kind="human", created_at=T0,
                last_interaction_at=None,
            )  # fmt: skip
        with pytest.raises(InputError, match="invalid agent id"):
            Person(
                id=new_id(), agent_id="ada", display_name="Bob", kind="human", created_at=T0,
                last_interaction_at=None,
            )  # fmt: skip

    async def test_times_come_back_timezone_aware_utc(self, store: FullStore) -> None:
        eastern = timezone(timedelta(hours=-5))
        agent = await store.ensure_agent(new_id(), "Anna", datetime(2026, 1, 5, 4, 0, tzinfo=eastern))
        assert agent.created_at.tzinfo is UTC
        assert agent.created_at == T0

    # events and completion markers ------------------------------------------------------------
    async def test_save_event_round_trips_and_deduplicates_on_id(self, store: FullStore) -> None:
        agent_id = new_id()
        event = _event(agent_id, "first")
        assert await store.save_event(event) is True
        assert await store.save_event(event.model_copy(update={"text": "changed"})) is False
        assert await store.get_event(agent_id, event.id) == event
        assert await store.get_event(agent_id, new_id()) is None

    async def test_an_event_keeps_its_attachments_in_order(self, store: FullStore) -> None:
        agent_id = new_id()
        photo = Attachment(
            kind=AttachmentKind.IMAGE,
            media_type="image/png",
            size=1234,
            reference=f"att-{new_id(T0)}",
            filename="bike.png",
            meta={"width": "640", "height": "480"},
        )
        note = Attachment(
            kind=AttachmentKind.AUDIO, media_type="audio/wav", size=88, reference=f"att-{new_id(T0)}"
        )
        event = _event(agent_id, "is this mine?").model_copy(update={"attachments": (photo, note)})
        assert await store.save_event(event) is True
        assert await store.get_event(agent_id, event.id) == event
        plain = _event(agent_id, "no attachments")
        await store.save_event(plain)
        assert (await store.get_event(agent_id, plain.id) or event).attachments == ()

    async def test_a_marker_is_replaced_expires_at_now_and_is_purged(self, store: FullStore) -> None:
        agent_id = new_id()
        event_id = new_id(T0)
        first = CompletionMarker(
            event_id=event_id,
            transmitted=False,
            reason="crashed",
            created_at=T0,
            expires_at=T0 + timedelta(hours=1),
        )
        await store.put_marker(agent_id, first)
        assert await store.get_marker(agent_id, event_id, T0) == first
        second = first.model_copy(update={"transmitted": True, "text": "hi", "reason": None})
        await store.put_marker(agent_id, second)
        assert await store.get_marker(agent_id, event_id, T0) == second
        assert await store.get_marker(agent_id, event_id, second.expires_at) is None  # expired at `now`

        later = CompletionMarker(
            event_id=new_id(T0), transmitted=True, created_at=T0, expires_at=T0 + timedelta(days=1)
        )
        await store.put_marker(agent_id, later)
        assert await store.purge_markers(T0 + timedelta(hours=2)) == 1
        assert await store.purge_markers(T0 + timedelta(hours=2)) == 0
        assert await store.get_marker(agent_id, later.event_id, T0) == later

    # persons -------------------------------------------------------------------------------------
    async def test_resolve_person_creates_once_and_tracks_last_interaction(self, store: FullStore) -> None:
        agent_id = new_id()
        ann = await store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0)
        assert (ann.display_name, ann.kind, ann.created_at, ann.last_interaction_at) == (
            "Ann",
            "human",
            T0,
            T0,
        )
        assert ann.identities == (_identity("u1"),)

        later = T0 + timedelta(hours=3)
        again = await store.resolve_person(agent_id, _identity("u1"), "Annie", "agent", later)
        # The first contact decides the name; a network flagging them as an agent upgrades the kind
        # (never the reverse: directory.py).
        assert (again.id, again.display_name, again.kind) == (ann.id, "Ann", "agent")
        assert again.last_interaction_at == later
        replayed = await store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0)
        assert replayed.last_interaction_at == later  # never moves backwards

        bot = await store.resolve_person(agent_id, _identity("b1"), "Bot", "agent", T0)
        assert bot.id != ann.id
        assert await store.get_person(agent_id, ann.id) == again
        assert await store.get_person(agent_id, new_id()) is None
        assert [p.id for p in await store.list_persons(agent_id)] == [ann.id, bot.id]

    async def test_concurrent_first_contacts_yield_one_person(self, store: FullStore) -> None:
        agent_id = new_id()
        resolved = await asyncio.gather(
            *(store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0) for _ in range(20))
        )
        assert len({person.id for person in resolved}) == 1
        assert len(await store.list_persons(agent_id)) == 1

    async def test_rename_person(self, store: FullStore) -> None:
        agent_id = new_id()
        ann = await store.resolve_person(agent_id, _identity(), "Ann", "human", T0)
        renamed = await store.rename_person(agent_id, ann.id, "Annabel")
        assert renamed == ann.model_copy(update={"display_name": "Annabel"})
        assert await store.get_person(agent_id, ann.id) == renamed
        with pytest.raises(StoreError):
            await store.rename_person(agent_id, new_id(), "Nobody")

    async def test_preferences_are_per_person_and_overwritten(self, store: FullStore) -> None:
        agent_id = new_id()
        ann = await store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0)
        bob = await store.resolve_person(agent_id, _identity("u2"), "Bob", "human", T0)
        assert await store.get_preference(agent_id, ann.id, "language") is None
        await store.set_preference(agent_id, ann.id, "language", "fr")
        await store.set_preference(agent_id, ann.id, "language", "de")
        assert await store.get_preference(agent_id, ann.id, "language") == "de"
        assert await store.get_preference(agent_id, bob.id, "language") is None
        with pytest.raises(StoreError):  # no such person for this agent
            await store.set_preference(agent_id, new_id(), "language", "fr")

    # conversations -------------------------------------------------------------------------------
    async def test_open_conversation_is_reused_while_active_and_unions_participants(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        ann, bob = new_id(), new_id()
        first = await _open(store, agent_id, participants=(ann,))
        assert (first.participant_ids, first.started_at, first.closed_at, first.kind) == (
            (ann,),
            T0,
            None,
            "dialog",
        )
        later = T0 + timedelta(minutes=30)
        same = await _open(store, agent_id, at=later, participants=(bob, ann))
        assert same.id == first.id
        assert same.participant_ids == (ann, bob)
        assert (same.started_at, same.last_activity_at) == (T0, later)
        assert await store.get_conversation(agent_id, first.id) == same
        assert await store.get_conversation(agent_id, new_id()) is None

    async def test_an_idle_conversation_is_closed_and_succeeded(self, store: FullStore) -> None:
        agent_id = new_id()
        first = await _open(store, agent_id)
        at_timeout = T0 + timedelta(seconds=HOUR)
        assert (await _open(store, agent_id, at=at_timeout)).id == first.id  # not idle *longer* yet
        after = at_timeout + timedelta(seconds=HOUR, microseconds=1)
        second = await _open(store, agent_id, at=after)
        assert second.id != first.id
        assert second.started_at == after
        closed = await store.get_conversation(agent_id, first.id)
        assert closed is not None
        assert closed.closed_at == after

    async def test_conversation_kinds_and_channels_are_separate(self, store: FullStore) -> None:
        agent_id = new_id()
        dialog = await _open(store, agent_id)
        reflection = await store.open_conversation(
            agent_id, "terminal", "main", (), T0, HOUR, kind="reflection"
        )
        elsewhere = await _open(store, agent_id, channel="other")
        assert len({dialog.id, reflection.id, elsewhere.id}) == 3
        assert reflection.kind == "reflection"

    async def test_close_idle_conversations(self, store: FullStore) -> None:
        agent_a, agent_b = new_id(), new_id()
        stale = await _open(store, agent_a, channel="stale")
        fresh = await _open(store, agent_a, channel="fresh", at=T0 + timedelta(hours=2))
        other_agent = await _open(store, agent_b)
        now = T0 + timedelta(hours=2, minutes=30)

        closed = await store.close_idle_conversations(agent_a, now, HOUR)
        assert [(c.id, c.closed_at) for c in closed] == [(stale.id, now)]
        assert await store.close_idle_conversations(agent_a, now, HOUR) == []
        swept = await store.close_idle_conversations(None, now, HOUR)  # every agent
        assert [c.id for c in swept] == [other_agent.id]
        still_open = await store.get_conversation(agent_a, fresh.id)
        assert still_open is not None
        assert still_open.closed_at is None

    async def test_list_conversations_newest_first_and_by_channel(self, store: FullStore) -> None:
        agent_id = new_id()
        opened = [
            await _open(store, agent_id, channel=channel, at=T0 + timedelta(hours=2 * i))  # a: idle, reopened
            for i, channel in enumerate(["a", "b", "a", "c"])
        ]
        listed = await store.list_conversations(agent_id)
        assert [c.id for c in listed] == [c.id for c in reversed(opened)]
        assert [c.channel for c in await store.list_conversations(agent_id, channel="c")] == ["c"]
        assert [c.id for c in await store.list_conversations(agent_id, limit=2)] == [
            opened[3].id,
            opened[2].id,
        ]
        assert await store.list_conversations(agent_id, channel="none") == []

    async def test_close_conversation_closes_one_conversation_once(self, store: FullStore) -> None:
        agent_id = new_id()
        now = datetime(2026, 11, 30, 9, tzinfo=UTC)
        mine = await store.open_conversation(agent_id, "self", "heartbeat", [], now, 3600, kind="reflection")
        other = await store.open_conversation(agent_id, "terminal", "terminal", [], now, 3600)
        closed = await store.close_conversation(agent_id, mine.id, now)
        assert closed is not None and closed.id == mine.id and closed.closed_at == now
        assert await store.close_conversation(agent_id, mine.id, now) is None  # hooks enqueue once
        assert await store.close_conversation(new_id(), other.id, now) is None  # another agent's id
        still_open = await store.get_conversation(agent_id, other.id)
        assert still_open is not None and still_open.closed_at is None
        # The next run on that channel is a new conversation.
        again = await store.open_conversation(agent_id, "self", "heartbeat", [], now, 3600, kind="reflection")
        assert again.id != mine.id
