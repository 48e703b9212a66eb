"""What the decision weighs besides the configured rules (SPEC §4 step 6): quick facts about
the agent itself, its open goals and its current emotional state, each shown only where it may
surface (`memory.access`), on a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.cognition.deliberation import decide_prompt
from persyn.cognition.emotion import decision_preferences
from persyn.cognition.pipeline import TurnSetup
from persyn.core.config import AgentConfig, EmotionConfig
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.store.base import Goal, Provenance
from persyn.store.ports.emotions import EmotionReading
from persyn.store.sqlite.store import SQLiteStore

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(T0))
ANN, MALLORY = new_id(T0 + timedelta(seconds=1)), new_id(T0 + timedelta(seconds=2))
ON = EmotionConfig(enabled=True)


def _setup(channel: str, person: str) -> TurnSetup:
    return TurnSetup(
        agent_id=AGENT.id,
        event_id=new_id(T0 + timedelta(minutes=5)),
        service="irc",
        channel=channel,
        conversation_id=new_id(T0 + timedelta(minutes=1)),
        person_id=person,
        speaker_name="x",
        inbound_message_id=new_id(T0 + timedelta(minutes=5)),
        received_at=T0 + timedelta(minutes=5),
        participant_ids=(person,),
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    yield opened
    await opened.close()


async def test_self_facts_goals_and_state_are_weighed_where_they_may_surface(store: SQLiteStore) -> None:
    in_anns_dm = Provenance(channel="irc:ann", participant_ids=(ANN,), sensitivity=Sensitivity.PRIVATE)
    await store.set_fact(AGENT.id, AGENT.id, "favourite task", "proofreading", T0)
    await store.set_fact(
        AGENT.id, AGENT.id, "promised Ann", "to keep her draft secret", T0, provenance=in_anns_dm
    )
    for n, (text, where) in enumerate((("learn to garden", Provenance()), ("help Ann move", in_anns_dm))):
        at = T0 + timedelta(seconds=10 + n)
        await store.add_goal(
            Goal(
                id=new_id(at),
                agent_id=AGENT.id,
                description=text,
                created_at=at,
                updated_at=at,
                provenance=where,
            )
        )

    with_ann = await decision_preferences(store, _setup("ann", ANN), (), ON, T0)
    assert (
        "- favourite task: proofreading" in with_ann
        and "- promised Ann: to keep her draft secret" in with_ann
    )
    assert "- learn to garden" in with_ann and "- help Ann move" in with_ann
    assert "How I feel" not in with_ann  # no reading yet

    elsewhere = await decision_preferences(store, _setup("#lobby", MALLORY), (), ON, T0)
    assert "proofreading" in elsewhere and "learn to garden" in elsewhere
    assert "draft secret" not in elsewhere and "help Ann move" not in elsewhere  # formed with Ann only

    at = T0 + timedelta(minutes=3)
    await store.add_emotion_reading(
        EmotionReading(
            id=new_id(at),
            agent_id=AGENT.id,
            created_at=at,
            distribution={"frustrated": 0.8, "calm": 0.2},
            top="frustrated",
        )
    )
    felt = await decision_preferences(store, _setup("#lobby", MALLORY), (), ON, T0)
    assert "How I feel right now: frustrated (frustrated 80%, calm 20%), since 09:03." in felt
    assert "Feeling frustrated, I may decline a request that is optional" in felt
    calm = EmotionConfig(enabled=True, decline_when=[])
    assert "may decline" not in await decision_preferences(store, _setup("#lobby", MALLORY), (), calm, T0)

    prompt = decide_prompt(AGENT, [], "a draft", addressed=True, preferences=felt)
    assert prompt.system.endswith(felt) and "weigh what you have come to prefer and feel" in prompt.system
    assert (
        decide_prompt(AGENT, [], "a draft", addressed=True).system
        == decide_prompt(AGENT, [], "a draft", addressed=True, preferences="").system
    )  # nothing to weigh: the brief as before
