"""Consolidation with model doubles over a real SQLite store (issue 3 §6)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from persyn.core.config import AgentConfig, MemoryConfig, Settings, load_settings
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.gateway.gateway import ModelGateway
from persyn.memory.consolidate import Consolidator, near_duplicate, raise_only
from persyn.store import open_store
from persyn.store.base import Conversation, Identity, Message, Role
from persyn.store.capabilities import FullStore
from persyn.testing import registered_double
from persyn.testing.embedder import HashEmbedder
from persyn.testing.models import last_user_text
from persyn.usage.meter import Meter

START = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(START))


class Script:
    """Answers summarize and rate requests; remembers what it was shown."""

    def __init__(self, summary: str, importance: int = 5, sensitivity: str = "public") -> None:
        self.summary = summary
        self.importance = importance
        self.sensitivity = sensitivity
        self.seen: dict[str, str] = {}

    def __call__(self, task: str | None, messages: list[Any], info: Any) -> dict[str, Any]:
        self.seen[str(task)] = str(info.instructions or "") + "\n" + last_user_text(messages)
        if task == "summarize":
            return {"summary": self.summary, "tags": ["Travel", "plans"]}
        return {
            "emotional_significance": 3,
            "decisions": 2,
            "novelty": 4,
            "continuing_themes": 1,
            "explicit_importance": 0,
            "importance": self.importance,
            "sensitivity": self.sensitivity,
            "emotion": "curious",
        }


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullStore]:
    store = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await store.setup()
    await store.ensure_agent(AGENT.id, AGENT.name, START)
    try:
        yield store
    finally:
        await store.close()


def _settings(tmp_path: Path) -> Settings:
    (tmp_path / "persyn.toml").write_text(
        '[models]\ndefault = "test:consolidation"\n[metering]\nevent_log = false\n'
    )
    return load_settings(tmp_path, environ={}).model_copy(update={"agents": [AGENT]})


async def _conversation(store: FullStore, lines: list[tuple[Role, str]]) -> Conversation:
    sam = await store.resolve_person(
        AGENT.id, Identity(service="terminal", channel="terminal", speaker_id="sam"), "Sam", "human", START
    )
    conversation = await store.open_conversation(AGENT.id, "terminal", "terminal", [sam.id], START, 1800)
    for index, (role, text) in enumerate(lines):
        at = START + timedelta(seconds=index)
        await store.add_message(
            Message(
                id=new_id(at),
                agent_id=AGENT.id,
                conversation_id=conversation.id,
                role=role,
                person_id=sam.id if role is Role.USER else None,
                speaker_name="Sam" if role is Role.USER else "Ada",
                text=text,
                created_at=at,
                event_id=None,
            )
        )
    closed = await store.close_idle_conversations(AGENT.id, START + timedelta(hours=1), 1800)
    assert [c.id for c in closed] == [conversation.id]
    return closed[0]


def _consolidator(
    store: FullStore, tmp_path: Path, embedder: HashEmbedder | None = None
) -> tuple[Consolidator, ModelGateway]:
    settings = _settings(tmp_path)
    gateway = ModelGateway(settings, AGENT, Meter([]))
    return Consolidator(store, gateway, embedder, MemoryConfig(), AGENT.name), gateway


async def test_summary_keeps_epistemic_framing_and_rating_comes_from_structured_output(
    store: FullStore, tmp_path: Path
) -> None:
    said = "I assumed, without confirming, that Sam is moving to Lisbon; I promised to send him a guide."
    script = Script(said, importance=8, sensitivity="public")
    conversation = await _conversation(
        store,
        [(Role.USER, "I might be moving, maybe Lisbon."), (Role.AGENT, "Exciting! I'll send you a guide.")],
    )
    consolidator, gateway = _consolidator(store, tmp_path, HashEmbedder())
    with registered_double("consolidation", script):
        result = await consolidator.consolidate(AGENT.id, conversation)
    await gateway.aclose()
    assert result.record is not None
    stored = await store.get_record(AGENT.id, result.record.id)
    assert stored is not None
    assert stored.summary == said  # the inference marker survives into the autobiography
    assert stored.importance == 8
    assert stored.tags == ("plans", "travel")
    assert stored.emotion == "curious"
    assert stored.channel == "terminal:terminal"
    assert stored.conversation_id == conversation.id
    assert stored.participant_ids == conversation.participant_ids
    assert len(stored.message_ids) == 2
    # The private default of a terminal conversation is never lowered by the model.
    assert stored.sensitivity is Sensitivity.PRIVATE
    assert "inferred, guessed or assumed" in script.seen["summarize"]
    assert "Lisbon" in script.seen["summarize"]
    assert "rubric" in script.seen["rate"]
    assert (await store.vector_candidates(AGENT.id, (await HashEmbedder().embed([said]))[0], 1, None))[0][
        0
    ] == stored.id


async def test_model_may_raise_sensitivity(store: FullStore, tmp_path: Path) -> None:
    conversation = await _conversation(
        store, [(Role.USER, "Keep this between us: my diagnosis."), (Role.AGENT, "Of course.")]
    )
    consolidator, gateway = _consolidator(store, tmp_path)
    with registered_double(
        "consolidation", Script("Sam told me about his diagnosis in confidence.", sensitivity="restricted")
    ):
        result = await consolidator.consolidate(AGENT.id, conversation)
    await gateway.aclose()
    assert result.record is not None
    assert result.record.sensitivity is Sensitivity.RESTRICTED


async def test_a_recalled_memory_is_not_extracted_again(store: FullStore, tmp_path: Path) -> None:
    old = MemoryRecord(
        id=new_id(START - timedelta(days=30)),
        agent_id=AGENT.id,
        created_at=START - timedelta(days=30),
        channel="terminal:terminal",
        summary="I met Sam at the climbing gym and he told me about his dog Rex.",
    )
    assert await store.add_record(old, None, None)
    conversation = await _conversation(
        store, [(Role.USER, "Remember Rex?"), (Role.AGENT, "Yes, your dog Rex from the climbing gym chat!")]
    )
    consolidator, gateway = _consolidator(store, tmp_path)
    script = Script("I met Sam at the climbing gym and he told me about his dog Rex.")
    with registered_double("consolidation", script):
        result = await consolidator.consolidate(AGENT.id, conversation, recalled_ids=[old.id])
    await gateway.aclose()
    assert result.record is None
    assert result.skipped == "it only restated memories I recalled"
    assert "already stored" in script.seen["summarize"]
    assert await store.count_records(AGENT.id) == 1


async def test_consolidating_twice_stores_one_record_and_no_vector_is_not_fatal(
    store: FullStore, tmp_path: Path
) -> None:
    conversation = await _conversation(store, [(Role.USER, "Let's plan the trip."), (Role.AGENT, "Sure.")])
    consolidator, gateway = _consolidator(store, tmp_path, embedder=None)
    with registered_double("consolidation", Script("I started planning a trip with Sam.")):
        first = await consolidator.consolidate(AGENT.id, conversation)
        second = await consolidator.consolidate(AGENT.id, conversation)
    await gateway.aclose()
    assert first.record is not None
    assert second.skipped == "already consolidated"
    assert await store.count_records(AGENT.id) == 1


def test_sensitivity_is_only_ever_raised() -> None:
    for floor in Sensitivity:
        for proposed in Sensitivity:
            assert raise_only(floor, proposed).rank == max(floor.rank, proposed.rank)


def test_near_duplicate_detects_restatements_not_news() -> None:
    stored = ["I met Sam at the climbing gym and he told me about his dog Rex."]
    assert near_duplicate("Sam told me about his dog Rex, whom I met at the climbing gym.", stored)
    assert not near_duplicate(
        "Sam adopted a second dog, a puppy called Mia, and asked me to name her.", stored
    )
