"""What every storage backend must do (the `Store` port, ARCHITECTURE §4).

Every test takes the `store` (or `store_url`) fixture from conftest.py, so it runs once per
backend. Times come from fixed instants, never the wall clock.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
from datetime import UTC, datetime, timedelta, timezone
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persyn.core.errors import ConfigError, InputError, StoreError
from persyn.core.events import CompletionMarker, Event, Speaker
from persyn.core.ids import derived_id, new_id
from persyn.store import Conversation, Identity, Message, Person, Role, open_store
from persyn.store.base import ReplyUpkeep
from persyn.store.capabilities import FullStore
from persyn.store.ports.runs import ChannelEntry, SpendKind
from persyn.store.schema.migrations import LATEST_VERSION

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


# lifecycle and agents -------------------------------------------------------------------
async def test_setup_is_idempotent_and_reports_the_latest_version(store: FullStore) -> None:
    await store.setup()
    assert await store.schema_version() == LATEST_VERSION


async def test_a_closed_store_refuses_work(store_url: str) -> None:
    closed = open_store(store_url)
    await closed.setup()
    await closed.close()
    await closed.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await closed.count_messages(new_id())


async def test_ensure_agent_creates_once_and_follows_renames(store: FullStore) -> None:
    agent_id = new_id()
    first = await store.ensure_agent(agent_id, "Anna", T0)
    again = await store.ensure_agent(agent_id, "Anna II", T0 + timedelta(days=1))
    assert (again.id, again.name, again.created_at) == (agent_id, "Anna II", first.created_at)
    other = await store.ensure_agent(new_id(), "Bob", T0 + timedelta(days=2))
    assert await store.list_agents() == [again, other]


async def test_non_ulid_ids_are_rejected_before_anything_is_stored(store: FullStore) -> None:
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
    store: FullStore, field: str, bad: str, complaint: str
) -> None:
    """The row type checks its ids as it is built, the same for every backend: a message
    with a bad id cannot be made, so nothing of it is stored."""
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    good = _message(conversation, "hello").model_dump()
    with pytest.raises(InputError, match=complaint):
        Message.model_validate(good | {field: bad})  # refused here, not in an adapter
    assert await store.count_messages(agent_id) == 0


async def test_conversations_and_persons_with_bad_ids_cannot_be_built() -> None:
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


async def test_times_come_back_timezone_aware_utc(store: FullStore) -> None:
    eastern = timezone(timedelta(hours=-5))
    agent = await store.ensure_agent(new_id(), "Anna", datetime(2026, 1, 5, 4, 0, tzinfo=eastern))
    assert agent.created_at.tzinfo is UTC
    assert agent.created_at == T0


# events and completion markers ------------------------------------------------------------
async def test_save_event_round_trips_and_deduplicates_on_id(store: FullStore) -> None:
    agent_id = new_id()
    event = _event(agent_id, "first")
    assert await store.save_event(event) is True
    assert await store.save_event(event.model_copy(update={"text": "changed"})) is False
    assert await store.get_event(agent_id, event.id) == event
    assert await store.get_event(agent_id, new_id()) is None


async def test_a_marker_is_replaced_expires_at_now_and_is_purged(store: FullStore) -> None:
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
async def test_resolve_person_creates_once_and_tracks_last_interaction(store: FullStore) -> None:
    agent_id = new_id()
    ann = await store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0)
    assert (ann.display_name, ann.kind, ann.created_at, ann.last_interaction_at) == ("Ann", "human", T0, T0)
    assert ann.identities == (_identity("u1"),)

    later = T0 + timedelta(hours=3)
    again = await store.resolve_person(agent_id, _identity("u1"), "Annie", "agent", later)
    # The first contact decides the name; a network flagging them as an agent upgrades the kind
    # (never the reverse: test_directory_contract.py).
    assert (again.id, again.display_name, again.kind) == (ann.id, "Ann", "agent")
    assert again.last_interaction_at == later
    replayed = await store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0)
    assert replayed.last_interaction_at == later  # never moves backwards

    bot = await store.resolve_person(agent_id, _identity("b1"), "Bot", "agent", T0)
    assert bot.id != ann.id
    assert await store.get_person(agent_id, ann.id) == again
    assert await store.get_person(agent_id, new_id()) is None
    assert [p.id for p in await store.list_persons(agent_id)] == [ann.id, bot.id]


async def test_concurrent_first_contacts_yield_one_person(store: FullStore) -> None:
    agent_id = new_id()
    resolved = await asyncio.gather(
        *(store.resolve_person(agent_id, _identity("u1"), "Ann", "human", T0) for _ in range(20))
    )
    assert len({person.id for person in resolved}) == 1
    assert len(await store.list_persons(agent_id)) == 1


async def test_rename_person(store: FullStore) -> None:
    agent_id = new_id()
    ann = await store.resolve_person(agent_id, _identity(), "Ann", "human", T0)
    renamed = await store.rename_person(agent_id, ann.id, "Annabel")
    assert renamed == ann.model_copy(update={"display_name": "Annabel"})
    assert await store.get_person(agent_id, ann.id) == renamed
    with pytest.raises(StoreError):
        await store.rename_person(agent_id, new_id(), "Nobody")


async def test_preferences_are_per_person_and_overwritten(store: FullStore) -> None:
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
async def test_open_conversation_is_reused_while_active_and_unions_participants(store: FullStore) -> None:
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


async def test_an_idle_conversation_is_closed_and_succeeded(store: FullStore) -> None:
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


async def test_conversation_kinds_and_channels_are_separate(store: FullStore) -> None:
    agent_id = new_id()
    dialog = await _open(store, agent_id)
    reflection = await store.open_conversation(agent_id, "terminal", "main", (), T0, HOUR, kind="reflection")
    elsewhere = await _open(store, agent_id, channel="other")
    assert len({dialog.id, reflection.id, elsewhere.id}) == 3
    assert reflection.kind == "reflection"


async def test_close_idle_conversations(store: FullStore) -> None:
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


async def test_list_conversations_newest_first_and_by_channel(store: FullStore) -> None:
    agent_id = new_id()
    opened = [
        await _open(store, agent_id, channel=channel, at=T0 + timedelta(hours=2 * i))  # a: idle, reopened
        for i, channel in enumerate(["a", "b", "a", "c"])
    ]
    listed = await store.list_conversations(agent_id)
    assert [c.id for c in listed] == [c.id for c in reversed(opened)]
    assert [c.channel for c in await store.list_conversations(agent_id, channel="c")] == ["c"]
    assert [c.id for c in await store.list_conversations(agent_id, limit=2)] == [opened[3].id, opened[2].id]
    assert await store.list_conversations(agent_id, channel="none") == []


# dialog ----------------------------------------------------------------------------------------
async def test_add_message_is_idempotent(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    event_id = new_id(T0)
    asked = _message(conversation, "hi?", event_id=event_id)
    assert await store.add_message(asked) is True
    assert await store.add_message(asked) is False  # same id
    reply = _message(conversation, "hello!", T0 + timedelta(seconds=1), role=Role.AGENT, event_id=event_id)
    assert await store.add_message(reply) is True
    retried = _message(
        conversation, "hello again!", T0 + timedelta(seconds=2), role=Role.AGENT, event_id=event_id
    )
    assert await store.add_message(retried) is False  # a second AGENT reply to the same event
    notice = _message(conversation, "note", T0 + timedelta(seconds=3), role=Role.SYSTEM, event_id=event_id)
    assert await store.add_message(notice) is True  # only AGENT replies are once per event
    assert await store.agent_reply_for_event(agent_id, event_id) == reply
    assert await store.agent_reply_for_event(agent_id, new_id()) is None
    assert await store.count_messages(agent_id) == 3


async def test_record_inbound_resolves_opens_and_adds_once(store: FullStore) -> None:
    agent_id = new_id()
    message_id = new_id(T0)

    def inbound(person: Person | None, conversation: Conversation) -> Message:
        assert person is not None
        return _message(conversation, "hi", message_id=message_id).model_copy(
            update={"person_id": person.id, "speaker_name": person.display_name}
        )

    speaker = (_identity(), "Ann", "human")
    person, conversation, message = await store.record_inbound(
        agent_id, speaker, "terminal", "main", T0, HOUR, "dialog", inbound
    )
    assert person is not None and person.display_name == "Ann"
    assert conversation.participant_ids == (person.id,)
    assert message.conversation_id == conversation.id and message.person_id == person.id
    # A replay stores nothing new and lands in the same person and conversation.
    again = await store.record_inbound(
        agent_id, speaker, "terminal", "main", T0 + timedelta(seconds=1), HOUR, "dialog", inbound
    )
    assert again[0] is not None and again[0].id == person.id
    assert again[1].id == conversation.id
    assert await store.count_messages(agent_id) == 1
    # Without a speaker (a system turn) there is no person and no participant.
    nobody, reflection, _ = await store.record_inbound(
        agent_id,
        None,
        "terminal",
        "main",
        T0,
        HOUR,
        "reflection",
        lambda p, c: _message(c, "note", role=Role.SYSTEM),
    )
    assert nobody is None and reflection.participant_ids == () and reflection.id != conversation.id


async def test_record_reply_stores_once_and_marks_from_the_stored_reply(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    event_id = new_id(T0)

    def marker(message: Message) -> CompletionMarker:
        return CompletionMarker(
            event_id=event_id,
            transmitted=True,
            text=message.text,
            created_at=T0,
            expires_at=T0 + timedelta(hours=1),
        )

    first = _message(conversation, "hello!", T0, role=Role.AGENT, event_id=event_id)
    assert await store.record_reply(first, marker) == first
    retried = _message(
        conversation, "hello again!", T0 + timedelta(seconds=1), role=Role.AGENT, event_id=event_id
    )
    assert await store.record_reply(retried, marker) == first
    found = await store.get_marker(agent_id, event_id, T0)
    assert found is not None and found.transmitted and found.text == "hello!"
    assert await store.count_messages(agent_id) == 1


async def test_record_reply_writes_the_turns_upkeep_with_the_reply_once(store: FullStore) -> None:
    """The deliberation trace is merged into the event's, the reply's ledger entry is spent
    once however often transmit is re-run, and the parked flags it carried are cleared."""
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    event_id = new_id(T0)
    await store.merge_deliberation(agent_id, event_id, {"critiques": ["kept"]}, T0)
    await store.set_flag(agent_id, "parked:test:main:a", "woven")
    await store.set_flag(agent_id, "parked:test:main:b", "not woven")

    def marker(message: Message) -> CompletionMarker:
        return CompletionMarker(
            event_id=event_id,
            transmitted=True,
            text=message.text,
            created_at=T0,
            expires_at=T0 + timedelta(hours=1),
        )

    spend = ChannelEntry(
        kind=SpendKind.REPLIED,
        service="test",
        channel="main",
        key=event_id,
        tokens=7,
        since=T0 - timedelta(days=1),
    )
    upkeep = ReplyUpkeep(trace={"decision": "speak"}, spend=spend, cleared_flags=("parked:test:main:a",))
    reply = _message(conversation, "hello!", T0, role=Role.AGENT, event_id=event_id)
    assert await store.record_reply(reply, marker, upkeep=upkeep) == reply
    assert await store.record_reply(reply, marker, upkeep=upkeep) == reply  # a re-run transmit
    (trace,) = await store.deliberation_traces(agent_id, [event_id])
    assert trace.trace == {"critiques": ["kept"], "decision": "speak"}
    since = T0 - timedelta(days=1)
    assert await store.channel_spent(agent_id, SpendKind.REPLIED, "test", "main", since) == 7
    assert await store.get_flag(agent_id, "parked:test:main:a") is None
    assert await store.get_flag(agent_id, "parked:test:main:b") == "not woven"


async def test_add_message_needs_an_existing_conversation(store: FullStore) -> None:
    agent_id = new_id()
    ghost = Conversation(
        id=new_id(), agent_id=agent_id, service="terminal", channel="main", participant_ids=(),
        started_at=T0, last_activity_at=T0, closed_at=None,
    )  # fmt: skip
    with pytest.raises(StoreError):
        await store.add_message(_message(ghost, "into the void"))


async def test_a_message_is_activity_in_its_conversation(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    later = T0 + timedelta(minutes=50)
    await store.add_message(_message(conversation, "slow reply", later, role=Role.AGENT))
    touched = await store.get_conversation(agent_id, conversation.id)
    assert touched is not None
    assert touched.last_activity_at == later
    assert await store.close_idle_conversations(agent_id, T0 + timedelta(minutes=90), HOUR) == []


async def test_recent_messages_are_the_last_ones_oldest_first(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    said = await _say(store, conversation, "one", "two", "three", "four")
    assert await store.recent_messages(agent_id, conversation.id, 3) == said[1:]
    assert await store.recent_messages(agent_id, conversation.id, 10) == said
    assert await store.recent_messages(agent_id, conversation.id, 0) == []


async def test_turn_messages_keep_the_input_and_stay_in_its_conversation(store: FullStore) -> None:
    agent_id = new_id()
    old = await _open(store, agent_id)
    await _say(store, old, "before, in a closed conversation")
    await store.close_idle_conversations(agent_id, T0 + timedelta(days=1), HOUR)
    new = await _open(store, agent_id, at=T0 + timedelta(days=1))
    day = T0 + timedelta(days=1)
    first, waiting = await _say(store, new, "first", "waited", start=day)
    later = await _say(store, new, "a", "b", "c", start=day + timedelta(minutes=5))
    # Oldest first; the input is kept however many messages were stored after it.
    assert await store.turn_messages(agent_id, new.id, waiting.id, 10) == [first, waiting, *later]
    assert await store.turn_messages(agent_id, new.id, waiting.id, 3) == [waiting, *later[1:]]
    assert await store.turn_messages(agent_id, new.id, waiting.id, 0) == []


async def test_channel_messages_span_conversations_on_that_channel_only(store: FullStore) -> None:
    agent_id = new_id()
    old = await _open(store, agent_id)
    early = await _say(store, old, "old one", "old two")
    await store.close_idle_conversations(agent_id, T0 + timedelta(days=1), HOUR)
    new = await _open(store, agent_id, at=T0 + timedelta(days=1))
    late = await _say(store, new, "new one", start=T0 + timedelta(days=1))
    other = await _open(store, agent_id, channel="other")
    await _say(store, other, "elsewhere", start=T0 + timedelta(days=2))
    assert await store.channel_messages(agent_id, "terminal", "main", 10) == early + late
    assert await store.channel_messages(agent_id, "terminal", "main", 2) == [early[1], late[0]]
    assert await store.channel_messages(agent_id, "irc", "main", 10) == []


async def test_search_ranks_best_match_first(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    passing, focused, unrelated = await _say(
        store,
        conversation,
        "we talked about many things today, the weather, work, and briefly pizza",
        "pizza pizza: the best pizza in town",
        "nothing to see here",
    )
    assert await store.search_messages(agent_id, "pizza") == [focused, passing]
    assert await store.search_messages(agent_id, "PIZZA weather") == [passing]  # every word
    assert await store.search_messages(agent_id, "talking") == [passing]  # stemmed
    assert await store.search_messages(agent_id, "pizza", limit=1) == [focused]
    assert await store.search_messages(agent_id, "absent") == []
    assert unrelated not in await store.search_messages(agent_id, "see nothing here town")


async def test_search_filters_by_inclusive_date_range(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    days = [T0 + timedelta(days=i) for i in range(3)]
    said = [_message(conversation, f"tea on day {i}", day) for i, day in enumerate(days)]
    for message in said:
        await store.add_message(message)
    assert await store.search_messages(agent_id, "tea", since=days[1]) == [said[2], said[1]]
    assert await store.search_messages(agent_id, "tea", until=days[1]) == [said[1], said[0]]
    assert await store.search_messages(agent_id, "tea", since=days[1], until=days[1]) == [said[1]]


HOSTILE_QUERIES = [
    *['"', "'", "(", ")", "*", "+", "^alpha", "-alpha", '"alpha', "foo*", "a:b", "text:alpha", "{text}: x"],
    *["NEAR(", "NEAR(a b, 1)", "AND", "OR NOT", "alpha OR", "", "   "],
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
async def test_search_treats_fts_syntax_as_plain_words(store: FullStore, query: str) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    await _say(store, conversation, "alpha:beta gamma NEAR the end (of text)")
    await store.search_messages(agent_id, query)  # must not raise


async def test_search_finds_words_written_with_syntax_characters(store: FullStore) -> None:
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    [message] = await _say(store, conversation, "alpha:beta gamma NEAR the end (of text)")
    for query in ["alpha:beta", '"gamma"', "(text)", "NEAR", "alpha*", "end)"]:
        assert await store.search_messages(agent_id, query) == [message], query


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=40))
async def test_search_never_raises_on_any_text(store: FullStore, query: str) -> None:
    # The fixture's store is shared by the examples; searching does not change it.
    await store.search_messages(new_id(), query)


# flags ------------------------------------------------------------------------------------------
async def test_flags_set_overwrite_and_delete(store: FullStore) -> None:
    agent_id = new_id()
    assert await store.get_flag(agent_id, "cursor") is None
    await store.set_flag(agent_id, "cursor", "1")
    await store.set_flag(agent_id, "cursor", "2")
    assert await store.get_flag(agent_id, "cursor") == "2"
    await store.set_flag(agent_id, "cursor", None)
    assert await store.get_flag(agent_id, "cursor") is None
    await store.set_flag(agent_id, "cursor", None)  # deleting nothing is fine


async def test_update_flag_changes_the_current_value(store: FullStore) -> None:
    agent_id = new_id()
    seen: list[str | None] = []

    def append(value: str | None) -> str:
        seen.append(value)
        return (value or "") + "x"

    assert await store.update_flag(agent_id, "k", append) == "x"
    assert await store.update_flag(agent_id, "k", append) == "xx"
    assert seen == [None, "x"]
    assert await store.get_flag(agent_id, "k") == "xx"
    assert await store.update_flag(agent_id, "k", lambda _: None) is None  # None deletes
    assert await store.get_flag(agent_id, "k") is None


async def test_set_flag_if_absent_is_compare_and_set(store: FullStore) -> None:
    agent_id = new_id()
    outcomes = await asyncio.gather(*(store.set_flag_if_absent(agent_id, "lock", str(i)) for i in range(10)))
    assert outcomes.count(True) == 1
    winner = outcomes.index(True)
    assert await store.get_flag(agent_id, "lock") == str(winner)
    assert await store.set_flag_if_absent(agent_id, "lock", "late") is False
    await store.set_flag(agent_id, "lock", None)
    assert await store.set_flag_if_absent(agent_id, "lock", "again") is True


async def test_flags_with_prefix_lists_only_that_prefix_of_that_agent(store: FullStore) -> None:
    agent_id, other = new_id(), new_id()
    await store.set_flag(agent_id, "parked:a:2", "two")
    await store.set_flag(agent_id, "parked:a:1", "one")
    await store.set_flag(agent_id, "parked:ab:1", "neighbour")
    await store.set_flag(agent_id, "parkee", "unrelated")
    await store.set_flag(other, "parked:a:3", "another agent's")
    assert await store.flags_with_prefix(agent_id, "parked:a:") == {"parked:a:1": "one", "parked:a:2": "two"}
    assert list(await store.flags_with_prefix(agent_id, "parked:a", limit=2)) == ["parked:a:1", "parked:a:2"]
    assert await store.flags_with_prefix(agent_id, "nothing:") == {}


# per-agent namespacing (SPEC §6) -----------------------------------------------------------------
async def test_nothing_agent_a_stores_is_visible_to_agent_b(store: FullStore) -> None:
    a, b = new_id(), new_id()
    event = _event(a)
    await store.save_event(event)
    marker = CompletionMarker(
        event_id=event.id, transmitted=True, created_at=T0, expires_at=T0 + timedelta(days=1)
    )
    await store.put_marker(a, marker)
    ann = await store.resolve_person(a, _identity(), "Ann", "human", T0)
    await store.set_preference(a, ann.id, "language", "fr")
    conversation = await _open(store, a, participants=(ann.id,))
    reply = _message(conversation, "secret pizza", role=Role.AGENT, event_id=event.id)
    await store.add_message(reply)
    await store.set_flag(a, "cursor", "7")

    assert await store.get_event(b, event.id) is None
    assert await store.get_marker(b, event.id, T0) is None
    assert await store.get_person(b, ann.id) is None
    assert await store.list_persons(b) == []
    assert await store.get_preference(b, ann.id, "language") is None
    assert await store.get_conversation(b, conversation.id) is None
    assert await store.list_conversations(b) == []
    assert await store.recent_messages(b, conversation.id, 10) == []
    assert await store.channel_messages(b, "terminal", "main", 10) == []
    assert await store.agent_reply_for_event(b, event.id) is None
    assert await store.search_messages(b, "pizza") == []
    assert await store.count_messages(b) == 0
    assert await store.get_flag(b, "cursor") is None
    assert await store.set_flag_if_absent(b, "cursor", "1") is True
    assert (await store.resolve_person(b, _identity(), "Ann", "human", T0)).id != ann.id
    assert (await _open(store, b)).id != conversation.id
    with pytest.raises(StoreError):  # A's person cannot be tied to B's data
        await store.set_preference(b, ann.id, "language", "de")
    assert await store.get_flag(a, "cursor") == "7"
    assert await store.get_marker(a, event.id, T0) == marker


# concurrency across OS processes --------------------------------------------------------------------
WRITES_PER_PROCESS = 60


def _write_from_process(url: str, agent_id: str, worker: int, start: Barrier) -> None:
    """Runs in a spawned process: its own interpreter, event loop and store instance."""
    start.wait(timeout=60)  # both workers go at once, whenever each finished importing
    asyncio.run(_write_many(url, agent_id, worker))


async def _write_many(url: str, agent_id: str, worker: int) -> None:
    store = open_store(url)
    try:
        await store.setup()  # racing the other process's setup on a fresh database
        await store.resolve_person(agent_id, _identity("shared"), "Ann", "human", T0)
        conversation = await _open(store, agent_id)
        for i in range(WRITES_PER_PROCESS):
            at = T0 + timedelta(seconds=i)
            await store.save_event(_event(agent_id, f"w{worker} event {i}", at))
            await store.add_message(_message(conversation, f"worker{worker} says {i}", at))
            await store.set_flag(agent_id, f"w{worker}-{i}", str(i))
        await store.set_flag_if_absent(agent_id, "leader", str(worker))
    finally:
        await store.close()


@pytest.mark.slow
async def test_two_processes_write_one_database_concurrently(store_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    agent_id = new_id()
    workers = [
        context.Process(target=_write_from_process, args=(store_url, agent_id, worker, start))
        for worker in (1, 2)
    ]
    for process in workers:
        process.start()
    await asyncio.gather(*(asyncio.to_thread(process.join, 120) for process in workers))
    assert [process.exitcode for process in workers] == [0, 0]  # a worker's traceback is on stderr

    store = open_store(store_url)
    await store.setup()
    try:
        assert await store.count_messages(agent_id) == 2 * WRITES_PER_PROCESS
        assert len(await store.list_persons(agent_id)) == 1
        assert len(await store.list_conversations(agent_id)) == 1
        assert await store.get_flag(agent_id, "leader") in {"1", "2"}
        for worker in (1, 2):
            assert await store.get_flag(agent_id, f"w{worker}-{WRITES_PER_PROCESS - 1}") is not None
            found = await store.search_messages(agent_id, f"worker{worker}", limit=1000)
            assert len(found) == WRITES_PER_PROCESS
    finally:
        await store.close()


# properties ----------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    offsets_ms=st.lists(st.integers(min_value=0, max_value=10**10), min_size=1, max_size=15, unique=True),
    texts=st.lists(st.text(max_size=50), min_size=15, max_size=15),
    order=st.randoms(use_true_random=False),
)
async def test_messages_round_trip_in_ulid_order(
    store: FullStore, offsets_ms: list[int], texts: list[str], order: random.Random
) -> None:
    # Each example uses its own agent, so examples sharing the fixture's store never meet.
    agent_id = new_id()
    conversation = await _open(store, agent_id)
    said = [
        _message(conversation, texts[i], T0 + timedelta(milliseconds=offset))
        for i, offset in enumerate(offsets_ms)
    ]
    shuffled = list(said)
    order.shuffle(shuffled)
    for message in shuffled:
        assert await store.add_message(message)
    back = await store.recent_messages(agent_id, conversation.id, len(said))
    assert back == sorted(said, key=lambda m: m.id)  # the very same messages, in ULID order
    assert [m.id for m in back] == sorted(m.id for m in said)


# open_store -----------------------------------------------------------------------------------------
def test_open_store_rejects_unknown_schemes_naming_the_url() -> None:
    with pytest.raises(ConfigError, match=r"redis://localhost.*'sqlite'"):
        open_store("redis://localhost/0")
    with pytest.raises(ConfigError, match=r"'persyn\.db'"):
        open_store("persyn.db")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgres://alice:hunter2@db/persyn", "'postgres://***@db/persyn'"),
        ("alice:hunter2@db/persyn", "'***@db/persyn'"),
        ("mysql://db/persyn?password=hunter2", "'mysql://db/persyn?password=***'"),
    ],
)
def test_open_store_names_a_wrong_url_without_its_password(url: str, shown: str) -> None:
    with pytest.raises(ConfigError) as raised:
        open_store(url)
    assert shown in str(raised.value) and "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "sqlite://host/x.db"]
)
def test_open_store_rejects_unusable_sqlite_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="invalid SQLite store URL"):
        open_store(url)


async def test_open_store_creates_parent_directories(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "persyn.db"
    created = open_store(f"sqlite:///{target}")
    try:
        await created.setup()
        assert target.exists()
    finally:
        await created.close()


async def test_purge_dialog_keeps_open_and_recent_conversations(store: FullStore) -> None:
    agent_id = new_id()
    old = await _open(store, agent_id)
    await store.add_message(_message(old, "an old line", T0))
    await store.close_idle_conversations(agent_id, T0 + timedelta(hours=2), HOUR)
    later = T0 + timedelta(days=100)
    recent = await store.open_conversation(agent_id, "terminal", "main", [], later, HOUR)
    await store.add_message(_message(recent, "a recent line", later))
    other_agent = new_id()
    theirs = await _open(store, other_agent)
    await store.add_message(_message(theirs, "not mine", T0))
    await store.close_idle_conversations(other_agent, T0 + timedelta(hours=2), HOUR)

    assert await store.purge_dialog(agent_id, T0 + timedelta(days=90)) == 1
    assert [m.text for m in await store.recent_messages(agent_id, old.id, 10)] == []
    assert [m.text for m in await store.recent_messages(agent_id, recent.id, 10)] == ["a recent line"]
    assert await store.search_messages(agent_id, "old line") == []
    assert await store.count_messages(other_agent) == 1


async def test_close_conversation_closes_one_conversation_once(store: FullStore) -> None:
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
