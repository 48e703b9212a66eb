"""The contact directory (SPEC §4.5, App. B) as every store must keep it: contact addresses
with type labels, and the participant index that bounds a contact's digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError, StoreError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.store import Identity
from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
TERMINAL = Identity(service="terminal", channel="terminal", speaker_id="operator:sam")
SLACK = Identity(service="slack", channel="general", speaker_id="U123")
HOUR = 3600


class DirectoryContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_a_contact_met_as_a_person_becomes_an_agent_when_known_as_one_never_back(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        bob = await store.resolve_person(agent_id, SLACK, "Bob", "human", T0)
        assert bob.kind == "human"
        # The network or the configuration now says a bot (`[channels.irc] bots` changed).
        again = await store.resolve_person(agent_id, SLACK, "Bob", "agent", T0 + timedelta(hours=1))
        assert (again.id, again.kind) == (bob.id, "agent")
        stored = await store.get_person(agent_id, bob.id)
        assert stored is not None and stored.kind == "agent"
        # Speaking later without the flag does not make it a person again.
        later = await store.resolve_person(agent_id, SLACK, "Bob", "human", T0 + timedelta(hours=2))
        assert later.kind == "agent"

    # contact addresses ----------------------------------------------------------------------------
    async def test_addresses_are_added_once_listed_oldest_first_and_removed(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        ann = await store.resolve_person(agent_id, SLACK, "Ann", "human", T0)
        assert await store.add_address(agent_id, sam.id, "email", "sam@example.com", T0)
        assert await store.add_address(agent_id, sam.id, " Phone ", " +44 20 7946 0000 ", T0 + timedelta(1))
        assert await store.add_address(agent_id, sam.id, "email", "sam@work.example", T0 + timedelta(2))
        assert await store.add_address(agent_id, ann.id, "matrix", "@ann:example.org", T0 + timedelta(3))
        # The same address again (after the label and value are normalised) changes nothing.
        assert not await store.add_address(agent_id, sam.id, "EMAIL", "sam@example.com ", T0 + timedelta(4))

        mine = await store.addresses(agent_id, sam.id)
        assert [(a.person_id, a.label, a.value) for a in mine] == [
            (sam.id, "email", "sam@example.com"),
            (sam.id, "phone", "+44 20 7946 0000"),
            (sam.id, "email", "sam@work.example"),
        ]
        assert mine[0].created_at == T0
        everyone = await store.addresses(agent_id)
        assert [(a.person_id, a.value) for a in everyone][-1] == (ann.id, "@ann:example.org")
        assert len(everyone) == 4

        assert await store.remove_address(agent_id, sam.id, "Email", "sam@example.com")
        assert not await store.remove_address(agent_id, sam.id, "email", "sam@example.com")
        assert not await store.remove_address(agent_id, sam.id, "matrix", "@ann:example.org")  # Ann's
        assert [a.value for a in await store.addresses(agent_id, sam.id)] == [
            "+44 20 7946 0000",
            "sam@work.example",
        ]

    @pytest.mark.parametrize(
        ("label", "value", "complaint"),
        [
            ("", "sam@example.com", "invalid address label"),
            ("e mail", "sam@example.com", "invalid address label"),
            ("x" * 33, "sam@example.com", "invalid address label"),
            ("-email", "sam@example.com", "invalid address label"),
            ("email", "   ", "invalid address"),
            ("email", "x" * 501, "invalid address"),
            ("email", "sam@example.com\nBcc: eve@example.com", "one line"),
        ],
    )
    async def test_a_bad_label_or_value_is_an_input_error_and_stores_nothing(
        self, store: FullStore, label: str, value: str, complaint: str
    ) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        with pytest.raises(InputError, match=complaint):
            await store.add_address(agent_id, sam.id, label, value, T0)
        assert await store.addresses(agent_id) == []

    async def test_addresses_belong_to_one_agent_and_need_a_contact(self, store: FullStore) -> None:
        agent_id, other_agent = new_id(), new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        await store.add_address(agent_id, sam.id, "email", "sam@example.com", T0)
        assert await store.addresses(other_agent) == []
        assert await store.addresses(other_agent, sam.id) == []
        with pytest.raises(StoreError, match="no contact"):  # Sam is not the other agent's contact
            await store.add_address(other_agent, sam.id, "email", "sam@example.com", T0)
        with pytest.raises(StoreError, match="no contact"):
            await store.remove_address(other_agent, sam.id, "email", "sam@example.com")
        with pytest.raises(StoreError, match="no contact"):
            await store.add_address(agent_id, new_id(), "email", "nobody@example.com", T0)
        assert [a.value for a in await store.addresses(agent_id)] == ["sam@example.com"]

    async def test_merge_moves_addresses_to_the_survivor_keeping_a_shared_one_once(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        dup = await store.resolve_person(agent_id, SLACK, "Sam K", "human", T0)
        await store.add_address(agent_id, sam.id, "email", "sam@example.com", T0)
        await store.add_address(agent_id, dup.id, "email", "sam@example.com", T0 + timedelta(1))
        await store.add_address(agent_id, dup.id, "phone", "+1 555 0100", T0 + timedelta(2))

        await store.merge_persons(agent_id, sam.id, dup.id)

        kept = await store.addresses(agent_id, sam.id)
        assert [(a.label, a.value) for a in kept] == [("email", "sam@example.com"), ("phone", "+1 555 0100")]
        assert await store.addresses(agent_id, dup.id) == []
        assert {a.person_id for a in await store.addresses(agent_id)} == {sam.id}

    # the participant index ------------------------------------------------------------------------
    async def test_a_persons_conversations_come_newest_first_and_bounded(self, store: FullStore) -> None:
        agent_id = new_id()
        sam, ann = new_id(), new_id()  # participant ids need not name stored persons
        started = []
        for day in range(6):  # one conversation a day, alternating channels
            channel = "general" if day % 2 else "random"
            talk = await store.open_conversation(agent_id, "slack", channel, [sam], T0 + timedelta(day), HOUR)
            started.append(talk.id)
        elsewhere = await store.open_conversation(
            agent_id, "slack", "ann-only", [ann], T0 + timedelta(7), HOUR
        )

        latest = await store.person_conversations(agent_id, sam, 3)
        assert [c.id for c in latest] == started[::-1][:3]
        assert [c.participant_ids for c in latest] == [(sam,)] * 3
        assert [c.id for c in await store.person_conversations(agent_id, sam, 100)] == started[::-1]
        assert await store.person_conversations(agent_id, sam, 0) == []
        assert [c.id for c in await store.person_conversations(agent_id, ann, 5)] == [elsewhere.id]
        assert await store.person_conversations(new_id(), sam, 5) == []  # another agent's index

    async def test_the_index_follows_participants_joining_an_open_conversation(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        sam, ann = new_id(), new_id()
        talk = await store.open_conversation(agent_id, "slack", "general", [sam], T0, HOUR)
        assert await store.person_conversations(agent_id, ann, 5) == []

        joined = await store.open_conversation(
            agent_id, "slack", "general", [ann], T0 + timedelta(minutes=5), HOUR
        )
        assert joined.id == talk.id and joined.participant_ids == (sam, ann)
        (seen_by_ann,) = await store.person_conversations(agent_id, ann, 5)
        assert seen_by_ann.id == talk.id and seen_by_ann.participant_ids == (sam, ann)
        # Speaking again indexes nothing twice.
        await store.open_conversation(
            agent_id, "slack", "general", [sam, ann], T0 + timedelta(minutes=9), HOUR
        )
        assert [c.id for c in await store.person_conversations(agent_id, sam, 5)] == [talk.id]

        # After the idle timeout the next message starts a new conversation, indexed too.
        later = await store.open_conversation(
            agent_id, "slack", "general", [ann], T0 + timedelta(hours=3), HOUR
        )
        assert later.id != talk.id
        assert [c.id for c in await store.person_conversations(agent_id, ann, 5)] == [later.id, talk.id]
        assert [c.id for c in await store.person_conversations(agent_id, sam, 5)] == [talk.id]

    async def test_merge_moves_the_index_to_the_survivor_once_per_conversation(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        dup = await store.resolve_person(agent_id, SLACK, "Sam K", "human", T0)
        mine = await store.open_conversation(agent_id, "terminal", "terminal", [sam.id], T0, HOUR)
        theirs = await store.open_conversation(
            agent_id, "slack", "general", [dup.id], T0 + timedelta(1), HOUR
        )
        both = await store.open_conversation(
            agent_id, "slack", "random", [dup.id, sam.id], T0 + timedelta(2), HOUR
        )

        await store.merge_persons(agent_id, sam.id, dup.id)

        merged = await store.person_conversations(agent_id, sam.id, 10)
        assert [c.id for c in merged] == [both.id, theirs.id, mine.id]
        assert [c.participant_ids for c in merged] == [(sam.id,)] * 3
        assert await store.person_conversations(agent_id, dup.id, 10) == []

    async def test_conversation_summaries_come_from_their_newest_memory(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = new_id()
        first = await store.open_conversation(agent_id, "slack", "general", [sam], T0, HOUR)
        second = await store.open_conversation(agent_id, "slack", "random", [sam], T0, HOUR)
        unconsolidated = await store.open_conversation(agent_id, "slack", "dev", [sam], T0, HOUR)

        def memory(conversation_id: str, summary: str, when: datetime) -> MemoryRecord:
            return MemoryRecord(
                id=new_id(when),
                agent_id=agent_id,
                created_at=when,
                channel=channel_key("slack", "general"),
                participant_ids=(sam,),
                summary=summary,
                conversation_id=conversation_id,
            )

        await store.add_records(
            [
                memory(first.id, "We planned the trip.", T0),
                memory(first.id, "We booked the trip.", T0 + timedelta(hours=1)),
                memory(second.id, "Sam asked about cellos.", T0),
            ],
            None,
            None,
        )
        found = await store.conversation_summaries(agent_id, [first.id, second.id, unconsolidated.id])
        assert found == {first.id: "We booked the trip.", second.id: "Sam asked about cellos."}
        assert await store.conversation_summaries(agent_id, []) == {}
        assert await store.conversation_summaries(new_id(), [first.id]) == {}

    async def test_a_person_seen_in_history_is_touched_forward_never_back(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        await store.touch_person(agent_id, sam.id, T0 - timedelta(days=400))  # older history
        kept = await store.get_person(agent_id, sam.id)
        assert kept is not None and kept.last_interaction_at == T0
        await store.touch_person(agent_id, sam.id, T0 + timedelta(days=2))
        moved = await store.get_person(agent_id, sam.id)
        assert moved is not None and moved.last_interaction_at == T0 + timedelta(days=2)
        await store.touch_person(agent_id, new_id(), T0)  # nobody: nothing happens
        assert [p.id for p in await store.list_persons(agent_id)] == [sam.id]
