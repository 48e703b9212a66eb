"""Contact curation (SPEC §4.5): attach, detach and merge, as every store must do them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.store import Identity, Message, Role
from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
TERMINAL = Identity(service="terminal", channel="terminal", speaker_id="operator:sam")
SLACK = Identity(service="slack", channel="general", speaker_id="U123")


async def _message(store: FullStore, agent_id: str, person_id: str, conversation_id: str, text: str) -> None:
    await store.add_message(
        Message(
            id=new_id(T0),
            agent_id=agent_id,
            conversation_id=conversation_id,
            role=Role.USER,
            person_id=person_id,
            speaker_name="Sam",
            text=text,
            created_at=T0,
            event_id=None,
        )
    )


class PeopleContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_merge_moves_identities_history_and_memories_to_the_survivor(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        samuel = await store.resolve_person(agent_id, SLACK, "samuel.k", "human", T0 + timedelta(days=2))
        await store.set_preference(agent_id, sam.id, "display_name", "Sam")
        await store.set_preference(agent_id, samuel.id, "display_name", "Samuel")
        await store.set_preference(agent_id, samuel.id, "pronouns", "he/him")
        slack_talk = await store.open_conversation(agent_id, "slack", "general", [samuel.id], T0, 3600)
        await _message(store, agent_id, samuel.id, slack_talk.id, "I play the cello.")
        memory = MemoryRecord(
            id=new_id(T0),
            agent_id=agent_id,
            created_at=T0,
            channel=channel_key("slack", "general"),
            participant_ids=(samuel.id, sam.id),
            summary="Samuel told me he plays the cello.",
        )
        assert await store.add_record(memory, None, None)

        merged = await store.merge_persons(agent_id, sam.id, samuel.id, "Sam K.")

        assert merged.id == sam.id and merged.display_name == "Sam K."
        assert sorted(merged.identities, key=str) == sorted([TERMINAL, SLACK], key=str)
        assert merged.last_interaction_at == T0 + timedelta(days=2)
        assert await store.get_person(agent_id, samuel.id) is None
        # The next message on either identity is recognised as the survivor.
        again = await store.resolve_person(agent_id, SLACK, "whoever", "human", T0 + timedelta(days=3))
        assert again.id == sam.id
        # The survivor's own preference wins; one only the other had moves over.
        assert await store.get_preference(agent_id, sam.id, "display_name") == "Sam"
        assert await store.get_preference(agent_id, sam.id, "pronouns") == "he/him"
        # Retroactive: conversations, messages and memories name the survivor (once).
        conversation = await store.get_conversation(agent_id, slack_talk.id)
        assert conversation is not None and conversation.participant_ids == (sam.id,)
        (message,) = await store.recent_messages(agent_id, slack_talk.id, 10)
        assert message.person_id == sam.id
        record = await store.get_record(agent_id, memory.id)
        assert record is not None and record.participant_ids == (sam.id,)

    async def test_merge_errors_change_nothing(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        with pytest.raises(StoreError, match="into itself"):
            await store.merge_persons(agent_id, sam.id, sam.id)
        with pytest.raises(StoreError, match="no contact"):
            await store.merge_persons(agent_id, sam.id, new_id())
        assert await store.get_person(agent_id, sam.id) == sam

    async def test_detach_is_forward_looking_and_attach_recognises_the_sender(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        sam = await store.attach_identity(agent_id, sam.id, SLACK)
        assert sorted(sam.identities, key=str) == sorted([TERMINAL, SLACK], key=str)
        assert (await store.resolve_person(agent_id, SLACK, "U123", "human", T0)).id == sam.id
        talk = await store.open_conversation(agent_id, "slack", "general", [sam.id], T0, 3600)
        await _message(store, agent_id, sam.id, talk.id, "hello from slack")

        sam = await store.detach_identity(agent_id, sam.id, SLACK)
        assert sam.identities == (TERMINAL,)
        # Old history stays where it formed...
        (message,) = await store.recent_messages(agent_id, talk.id, 10)
        assert message.person_id == sam.id
        # ...and new traffic on the detached identity is somebody new.
        stranger = await store.resolve_person(agent_id, SLACK, "U123", "human", T0 + timedelta(hours=1))
        assert stranger.id != sam.id and stranger.identities == (SLACK,)

    async def test_attach_refuses_an_identity_of_someone_else_and_detach_an_unknown_one(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        other = await store.resolve_person(agent_id, SLACK, "U123", "human", T0)
        with pytest.raises(StoreError, match="merge the two contacts"):
            await store.attach_identity(agent_id, sam.id, SLACK)
        with pytest.raises(StoreError, match="has no identity"):
            await store.detach_identity(agent_id, sam.id, SLACK)
        assert (await store.get_person(agent_id, other.id)) == other
        assert (await store.get_person(agent_id, sam.id)) == sam

    async def test_quick_facts_are_per_subject_overwritten_and_forgotten(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        await store.set_fact(agent_id, sam.id, "instrument", "cello", T0)
        await store.set_fact(agent_id, sam.id, "instrument", "viola", T0 + timedelta(days=1))
        await store.set_fact(agent_id, sam.id, "city", "Lyon", T0)
        await store.set_fact(agent_id, agent_id, "favourite colour", "green", T0)  # about the agent itself
        assert await store.facts(agent_id, sam.id) == {"city": "Lyon", "instrument": "viola"}
        assert await store.facts(agent_id, agent_id) == {"favourite colour": "green"}
        assert await store.facts(new_id(), sam.id) == {}  # another agent knows nothing of it
        await store.set_fact(agent_id, sam.id, "city", None, T0)
        assert await store.facts(agent_id, sam.id) == {"instrument": "viola"}
        with pytest.raises(StoreError, match="invalid fact key"):
            await store.set_fact(agent_id, sam.id, "  ", "x", T0)
        with pytest.raises(Exception, match="subject id"):
            await store.set_fact(agent_id, "not-an-id", "k", "x", T0)

    async def test_merge_moves_quick_facts_the_survivor_lacks(self, store: FullStore) -> None:
        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        dup = await store.resolve_person(agent_id, SLACK, "Sam K", "human", T0)
        await store.set_fact(agent_id, sam.id, "city", "Lyon", T0)
        await store.set_fact(agent_id, dup.id, "city", "Paris", T0)
        await store.set_fact(agent_id, dup.id, "instrument", "cello", T0)
        await store.merge_persons(agent_id, sam.id, dup.id)
        assert await store.facts(agent_id, sam.id) == {"city": "Lyon", "instrument": "cello"}
        assert await store.facts(agent_id, dup.id) == {}

    async def test_quick_facts_are_kept_per_provenance_and_follow_a_merge_by_scope(
        self, store: FullStore
    ) -> None:
        from persyn.core.records import Sensitivity
        from persyn.store.base import Provenance

        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        dup = await store.resolve_person(agent_id, SLACK, "Sam K", "human", T0)
        dm = Provenance(channel="slack:dm-sam", participant_ids=(sam.id,), sensitivity=Sensitivity.PRIVATE)
        room = Provenance(
            channel="slack:general", participant_ids=(sam.id, dup.id), sensitivity=Sensitivity.PUBLIC
        )
        await store.set_fact(agent_id, sam.id, "city", "Lyon", T0, provenance=dm)
        await store.set_fact(agent_id, sam.id, "city", "Paris", T0 + timedelta(days=1), provenance=room)
        rows = await store.fact_rows(agent_id, sam.id)
        assert [(f.value, f.provenance) for f in rows] == [("Paris", room), ("Lyon", dm)]  # newest first
        await store.set_fact(agent_id, sam.id, "city", None, T0, provenance=room)  # forgets that scope only
        assert [(f.value, f.provenance) for f in await store.fact_rows(agent_id, sam.id)] == [("Lyon", dm)]
        await store.set_fact(agent_id, dup.id, "city", "Nice", T0, provenance=dm)  # same scope: survivor wins
        await store.set_fact(agent_id, dup.id, "city", "Rome", T0, provenance=room)  # another scope: moves
        await store.merge_persons(agent_id, sam.id, dup.id)
        merged = await store.fact_rows(agent_id, sam.id)
        assert sorted((f.value, f.provenance.scope) for f in merged) == sorted(
            [("Lyon", dm.scope), ("Rome", room.scope)]
        )
        assert await store.fact_rows(agent_id, dup.id) == []

    async def test_observations_are_revised_with_an_audit_trail_and_follow_a_merge(
        self, store: FullStore
    ) -> None:
        from persyn.store.base import Observation

        agent_id = new_id()
        sam = await store.resolve_person(agent_id, TERMINAL, "Sam", "human", T0)
        dup = await store.resolve_person(agent_id, SLACK, "Sam K", "human", T0)
        job = Observation(
            id=new_id(T0),
            agent_id=agent_id,
            subject_id=sam.id,
            kind="occupation",
            value="teacher",
            observed_at=T0,
        )
        pet = Observation(
            id=new_id(T0), agent_id=agent_id, subject_id=dup.id, kind="pet", value="has a dog", observed_at=T0
        )
        await store.add_observation(job, "added", "Sam said he teaches")
        await store.add_observation(pet, "added", "mentioned walking the dog")
        later = T0 + timedelta(days=30)
        await store.revise_observation(agent_id, job.id, "head teacher", "superseded", "promoted", later)
        await store.merge_persons(agent_id, sam.id, dup.id)

        current = await store.observations(agent_id, sam.id)
        assert [(o.kind, o.value) for o in current] == [("pet", "has a dog"), ("occupation", "head teacher")]
        history = await store.observation_history(agent_id, sam.id)
        assert [(h.action, h.before, h.after, h.reason) for h in history] == [
            ("added", None, "teacher", "Sam said he teaches"),
            ("added", None, "has a dog", "mentioned walking the dog"),
            ("superseded", "teacher", "head teacher", "promoted"),
        ]
        await store.revise_observation(
            agent_id, pet.id, None, "contradicted", "the dog was a neighbour's", later
        )
        assert [o.kind for o in await store.observations(agent_id, sam.id)] == ["occupation"]
        assert (await store.observation_history(agent_id, sam.id))[-1].after is None
        with pytest.raises(StoreError, match="no observation"):
            await store.revise_observation(agent_id, pet.id, "x", "superseded", "gone", later)
