"""What every storage backend must do with the dialog (the `Store` port, ARCHITECTURE §4):
messages, search, flags, per-agent namespacing, and two OS processes writing one database.
Times come from fixed instants, never the wall clock.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
from datetime import datetime, timedelta
from multiprocessing.synchronize import Barrier

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persyn.core.errors import StoreError
from persyn.core.events import Attachment, AttachmentKind, CompletionMarker, Event, inbound_message_id
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord
from persyn.store import Conversation, Message, Person, Role
from persyn.store.base import ReplyUpkeep
from persyn.store.capabilities import FullStore
from persyn.store.ports.runs import ChannelEntry, SpendKind
from persyn.testing.store_contract.base import Contract, StoreFactory, full
from persyn.testing.store_contract.core import HOUR, T0, _event, _identity, _message, _open, _say

HOSTILE_QUERIES = [
    *['"', "'", "(", ")", "*", "+", "^alpha", "-alpha", '"alpha', "foo*", "a:b", "text:alpha", "{text}: x"],
    *["NEAR(", "NEAR(a b, 1)", "AND", "OR NOT", "alpha OR", "", "   "],
]


# concurrency across OS processes --------------------------------------------------------------------
WRITES_PER_PROCESS = 60


def _write_from_process(store_factory: StoreFactory, agent_id: str, worker: int, start: Barrier) -> None:
    """Runs in a spawned process: its own interpreter, event loop and store instance."""
    start.wait(timeout=60)  # both workers go at once, whenever each finished importing
    asyncio.run(_write_many(store_factory, agent_id, worker))


async def _write_many(store_factory: StoreFactory, agent_id: str, worker: int) -> None:
    store = full(store_factory())
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


class DialogContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    # dialog ----------------------------------------------------------------------------------------
    async def test_add_message_is_idempotent(self, store: FullStore) -> None:
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        event_id = new_id(T0)
        asked = _message(conversation, "hi?", event_id=event_id)
        assert await store.add_message(asked) is True
        assert await store.add_message(asked) is False  # same id
        reply = _message(
            conversation, "hello!", T0 + timedelta(seconds=1), role=Role.AGENT, event_id=event_id
        )
        assert await store.add_message(reply) is True
        retried = _message(
            conversation, "hello again!", T0 + timedelta(seconds=2), role=Role.AGENT, event_id=event_id
        )
        assert await store.add_message(retried) is False  # a second AGENT reply to the same event
        notice = _message(
            conversation, "note", T0 + timedelta(seconds=3), role=Role.SYSTEM, event_id=event_id
        )
        assert await store.add_message(notice) is True  # only AGENT replies are once per event
        assert await store.agent_reply_for_event(agent_id, event_id) == reply
        assert await store.agent_reply_for_event(agent_id, new_id()) is None
        assert await store.count_messages(agent_id) == 3

    async def test_record_inbound_resolves_opens_and_adds_once(self, store: FullStore) -> None:
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

    async def test_record_reply_stores_once_and_marks_from_the_stored_reply(self, store: FullStore) -> None:
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

    async def test_record_reply_writes_the_turns_upkeep_with_the_reply_once(self, store: FullStore) -> None:
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

    async def test_add_message_needs_an_existing_conversation(self, store: FullStore) -> None:
        agent_id = new_id()
        ghost = Conversation(
            id=new_id(), agent_id=agent_id, service="terminal", channel="main", participant_ids=(),
            started_at=T0, last_activity_at=T0, closed_at=None,
        )  # fmt: skip
        with pytest.raises(StoreError):
            await store.add_message(_message(ghost, "into the void"))

    async def test_a_message_is_activity_in_its_conversation(self, store: FullStore) -> None:
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        later = T0 + timedelta(minutes=50)
        await store.add_message(_message(conversation, "slow reply", later, role=Role.AGENT))
        touched = await store.get_conversation(agent_id, conversation.id)
        assert touched is not None
        assert touched.last_activity_at == later
        assert await store.close_idle_conversations(agent_id, T0 + timedelta(minutes=90), HOUR) == []

    async def test_recent_messages_are_the_last_ones_oldest_first(self, store: FullStore) -> None:
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        said = await _say(store, conversation, "one", "two", "three", "four")
        assert await store.recent_messages(agent_id, conversation.id, 3) == said[1:]
        assert await store.recent_messages(agent_id, conversation.id, 10) == said
        assert await store.recent_messages(agent_id, conversation.id, 0) == []

    async def test_turn_messages_keep_the_input_and_stay_in_its_conversation(self, store: FullStore) -> None:
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

    async def test_channel_messages_span_conversations_on_that_channel_only(self, store: FullStore) -> None:
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

    async def test_search_ranks_best_match_first(self, store: FullStore) -> None:
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

    async def test_search_filters_by_inclusive_date_range(self, store: FullStore) -> None:
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        days = [T0 + timedelta(days=i) for i in range(3)]
        said = [_message(conversation, f"tea on day {i}", day) for i, day in enumerate(days)]
        for message in said:
            await store.add_message(message)
        assert await store.search_messages(agent_id, "tea", since=days[1]) == [said[2], said[1]]
        assert await store.search_messages(agent_id, "tea", until=days[1]) == [said[1], said[0]]
        assert await store.search_messages(agent_id, "tea", since=days[1], until=days[1]) == [said[1]]

    @pytest.mark.parametrize("query", HOSTILE_QUERIES)
    async def test_search_treats_fts_syntax_as_plain_words(self, store: FullStore, query: str) -> None:
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        await _say(store, conversation, "alpha:beta gamma NEAR the end (of text)")
        await store.search_messages(agent_id, query)  # must not raise

    async def test_search_finds_words_written_with_syntax_characters(self, store: FullStore) -> None:
        agent_id = new_id()
        conversation = await _open(store, agent_id)
        [message] = await _say(store, conversation, "alpha:beta gamma NEAR the end (of text)")
        for query in ["alpha:beta", '"gamma"', "(text)", "NEAR", "alpha*", "end)"]:
            assert await store.search_messages(agent_id, query) == [message], query

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.text(max_size=40))
    async def test_search_never_raises_on_any_text(self, store: FullStore, query: str) -> None:
        # The fixture's store is shared by the examples; searching does not change it.
        await store.search_messages(new_id(), query)

    async def test_rank_messages_matches_any_word_best_first_on_the_channels_only(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        here = await _open(store, agent_id)
        elsewhere = await _open(store, agent_id, channel="other")
        both, focused, one, unrelated = await _say(
            store,
            here,
            "the fjord was cold and we meandered around it",
            "fjord fjord fjord: the fjord again",
            "we meandered with the dog along the river for a long time that day",
            "nothing to see here",
        )
        [other] = await _say(store, elsewhere, "the fjord on the other channel")
        await store.add_message(_message(here, "a reminder about the fjord", T0, role=Role.SYSTEM))
        hits = await store.rank_messages(
            agent_id, "What did they say about the fjord meander?", channels=["terminal:main"]
        )
        found = [hit.message for hit in hits]
        assert sorted(m.id for m in found) == sorted(
            m.id for m in (both, focused, one)
        )  # any word; stemmed; no reminder; not elsewhere
        assert found.index(both) < found.index(one)  # two rare words beat one (words unique to this test:
        # the index's statistics are every agent's)
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
        assert all(hit.conversation.id == here.id for hit in hits)
        assert unrelated not in found and other not in found
        both_channels = ["terminal:main", "terminal:other"]
        assert other in [
            h.message for h in await store.rank_messages(agent_id, "fjord", channels=both_channels)
        ]
        assert len(await store.rank_messages(agent_id, "fjord", channels=["terminal:main"], limit=1)) == 1
        assert await store.rank_messages(agent_id, "fjord", channels=[]) == []
        assert await store.rank_messages(agent_id, "?! ...", channels=["terminal:main"]) == []
        assert await store.rank_messages(new_id(), "fjord", channels=["terminal:main"]) == []

    async def test_forget_messages_takes_them_out_of_dialog_and_its_searches(self, store: FullStore) -> None:
        agent_id = new_id()
        here = await _open(store, agent_id)
        gone, kept = await _say(store, here, "the quokka ate my sandwich", "the quokka waved goodbye")
        assert await store.forget_messages(agent_id, [gone.id, gone.id, new_id()]) == 1
        assert await store.forget_messages(new_id(), [kept.id]) == 0  # another agent's: untouched
        assert await store.forget_messages(agent_id, []) == 0
        assert [m.id for m in await store.recent_messages(agent_id, here.id, 10)] == [kept.id]
        ranked = await store.rank_messages(agent_id, "quokka sandwich", channels=["terminal:main"])
        assert [hit.message.id for hit in ranked] == [kept.id]
        assert [m.id for m in await store.search_messages(agent_id, "quokka")] == [kept.id]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.text(max_size=40))
    async def test_rank_messages_never_raises_on_any_text(self, store: FullStore, query: str) -> None:
        await store.rank_messages(new_id(), query, channels=["terminal:main"])

    # flags ------------------------------------------------------------------------------------------
    async def test_flags_set_overwrite_and_delete(self, store: FullStore) -> None:
        agent_id = new_id()
        assert await store.get_flag(agent_id, "cursor") is None
        await store.set_flag(agent_id, "cursor", "1")
        await store.set_flag(agent_id, "cursor", "2")
        assert await store.get_flag(agent_id, "cursor") == "2"
        await store.set_flag(agent_id, "cursor", None)
        assert await store.get_flag(agent_id, "cursor") is None
        await store.set_flag(agent_id, "cursor", None)  # deleting nothing is fine

    async def test_update_flag_changes_the_current_value(self, store: FullStore) -> None:
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

    async def test_set_flag_if_absent_is_compare_and_set(self, store: FullStore) -> None:
        agent_id = new_id()
        outcomes = await asyncio.gather(
            *(store.set_flag_if_absent(agent_id, "lock", str(i)) for i in range(10))
        )
        assert outcomes.count(True) == 1
        winner = outcomes.index(True)
        assert await store.get_flag(agent_id, "lock") == str(winner)
        assert await store.set_flag_if_absent(agent_id, "lock", "late") is False
        await store.set_flag(agent_id, "lock", None)
        assert await store.set_flag_if_absent(agent_id, "lock", "again") is True

    async def test_flags_with_prefix_lists_only_that_prefix_of_that_agent(self, store: FullStore) -> None:
        agent_id, other = new_id(), new_id()
        await store.set_flag(agent_id, "parked:a:2", "two")
        await store.set_flag(agent_id, "parked:a:1", "one")
        await store.set_flag(agent_id, "parked:ab:1", "neighbour")
        await store.set_flag(agent_id, "parkee", "unrelated")
        await store.set_flag(other, "parked:a:3", "another agent's")
        assert await store.flags_with_prefix(agent_id, "parked:a:") == {
            "parked:a:1": "one",
            "parked:a:2": "two",
        }
        assert list(await store.flags_with_prefix(agent_id, "parked:a", limit=2)) == [
            "parked:a:1",
            "parked:a:2",
        ]
        assert await store.flags_with_prefix(agent_id, "nothing:") == {}

    # per-agent namespacing (SPEC §6) -----------------------------------------------------------------
    async def test_nothing_agent_a_stores_is_visible_to_agent_b(self, store: FullStore) -> None:
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

    @pytest.mark.slow
    async def test_two_processes_write_one_database_concurrently(self, store_factory: StoreFactory) -> None:
        context = multiprocessing.get_context("spawn")
        start = context.Barrier(2)
        agent_id = new_id()
        workers = [
            context.Process(target=_write_from_process, args=(store_factory, agent_id, worker, start))
            for worker in (1, 2)
        ]
        for process in workers:
            process.start()
        await asyncio.gather(*(asyncio.to_thread(process.join, 120) for process in workers))
        assert [process.exitcode for process in workers] == [0, 0]  # a worker's traceback is on stderr

        store = full(store_factory())
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
        self, store: FullStore, offsets_ms: list[int], texts: list[str], order: random.Random
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

    async def test_purge_dialog_keeps_open_and_recent_conversations(self, store: FullStore) -> None:
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

    async def test_held_attachments_are_those_of_retained_dialog_or_a_remaining_memory(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()

        def with_file(text: str, at: datetime) -> tuple[Event, str]:
            reference = f"att-{new_id(at)}"
            file = Attachment(kind=AttachmentKind.IMAGE, media_type="image/png", size=10, reference=reference)
            return _event(agent_id, text, at).model_copy(update={"attachments": (file,)}), reference

        conversation = await _open(store, agent_id)
        remembered, kept_by_memory = with_file("remember this", T0)
        forgotten, let_go = with_file("and this", T0 + timedelta(seconds=1))
        talked, in_dialog = with_file("still in the dialog", T0 + timedelta(seconds=2))
        await store.save_event(_event(agent_id, "no files"))
        for event in (remembered, forgotten, talked):
            assert await store.save_event(event)
            await store.add_message(
                _message(
                    conversation,
                    event.text,
                    event.received_at,
                    event_id=event.id,
                    message_id=inbound_message_id(event.id, event.received_at),
                )
            )
        memory = MemoryRecord(
            id=new_id(T0),
            agent_id=agent_id,
            created_at=T0,
            channel="terminal:main",
            summary="Ann showed me a photo.",
            importance=5,
            conversation_id=conversation.id,
            message_ids=(inbound_message_id(remembered.id, remembered.received_at),),
        )
        await store.add_record(memory, None, None)
        assert await store.held_attachments(agent_id) == {kept_by_memory, let_go, in_dialog}
        assert await store.held_attachments(new_id()) == set()  # another agent's hold nothing

        # The dialog purged: the memory still holds its original; the others are free.
        await store.close_idle_conversations(agent_id, T0 + timedelta(hours=2), HOUR)
        assert await store.purge_dialog(agent_id, T0 + timedelta(days=91)) == 3
        assert await store.held_attachments(agent_id) == {kept_by_memory}
        await store.delete_records(agent_id, [memory.id])
        assert await store.held_attachments(agent_id) == set()
