"""Which dossiers context assembly may show (SPEC §4.4 with the access rules of §4 step 2):
every observation must be repeatable here as the memory of its conversation would be."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from persyn.cognition.context import PeopleSource
from persyn.cognition.pipeline import TurnSetup
from persyn.core.config import MemoryConfig
from persyn.core.ids import new_id
from persyn.store import Identity, open_store
from persyn.store.base import Observation
from persyn.store.capabilities import FullStore

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT_ID = new_id(T0)


class Briefings:
    def __init__(self, person_id: str) -> None:
        self.person_id = person_id

    async def cached(self, agent_id: str, person_id: str) -> str | None:
        return "Ann is going through a divorce." if person_id == self.person_id else None


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


async def _setup(store: FullStore, speaker: str, people: list[str], channel: str) -> TurnSetup:
    await store.close_idle_conversations(AGENT_ID, datetime(2026, 12, 1, tzinfo=UTC), 60)  # a fresh talk
    talk = await store.open_conversation(AGENT_ID, "phone", channel, people, T0, 60)
    assert talk.participant_ids == tuple(people)
    return TurnSetup(
        agent_id=AGENT_ID,
        event_id=new_id(T0),
        service="phone",
        channel=channel,
        conversation_id=talk.id,
        person_id=speaker,
        speaker_name="Ann",
        inbound_message_id=new_id(T0),
        received_at=T0,
    )


@pytest.mark.parametrize(
    ("level", "alone", "elsewhere"), [("private", True, False), ("restricted", False, False)]
)
async def test_a_dossier_follows_the_sensitivity_of_what_it_was_learned_from(
    store: FullStore, level: str, alone: bool, elsewhere: bool
) -> None:
    ann = await store.resolve_person(
        AGENT_ID, Identity(service="phone", channel="line1", speaker_id="a"), "Ann", "human", T0
    )
    bo = await store.resolve_person(
        AGENT_ID, Identity(service="phone", channel="line1", speaker_id="b"), "Bo", "human", T0
    )
    together = await store.open_conversation(AGENT_ID, "phone", "line1", [ann.id, bo.id], T0, 60)
    await store.add_observation(
        Observation(
            id=new_id(T0),
            agent_id=AGENT_ID,
            subject_id=ann.id,
            kind="life",
            value="going through a divorce",
            observed_at=T0,
            conversation_id=together.id,
        ),
        "added",
        "test",
    )
    await store.close_idle_conversations(AGENT_ID, datetime(2026, 12, 1, tzinfo=UTC), 60)
    source = PeopleSource(
        store, lambda _: Briefings(ann.id), MemoryConfig(default_sensitivity={"phone": level})
    )

    both = await source(await _setup(store, ann.id, [ann.id, bo.id], "line1"), "hi")
    assert [s.title for s in both] == ["What I know about Ann"]  # in the same company: always
    solo = await source(await _setup(store, ann.id, [ann.id], "line1"), "hi")
    assert bool(solo) is alone  # Ann alone: private yes, restricted no
    other = await source(await _setup(store, ann.id, [ann.id], "line2"), "hi")
    assert bool(other) is elsewhere  # another channel: never
