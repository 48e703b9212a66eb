"""A memory's graph neighbours in the console (`ops.graph.memory_neighbours`) on a real SQLite
store: the entities its conversation taught and its text names, the relations one hop around
them and the other memories naming them — and nothing the memory's own situation could not
surface (a confidence learned in a DM never shows beside a memory of the group room)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from persyn.core.config import AgentConfig, load_settings
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.ops.graph import memory_neighbours
from persyn.ops.history import opened_capability
from persyn.store.capabilities import FullStore, MemoryStore
from persyn.store.ports.graph_rows import EntityFact, FactSource, RelationFact

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(NOW - timedelta(days=1)))
ROOM = "slack:general"
DM = "slack:dm-ann"


def _record(summary: str, channel: str = ROOM, **more: Any) -> MemoryRecord:
    at = NOW - timedelta(hours=1)
    return MemoryRecord(
        id=new_id(at), agent_id=AGENT.id, created_at=at, channel=channel, summary=summary, **more
    )


def _source(
    channel: str, conversation_id: str, sensitivity: Sensitivity, people: tuple[str, ...] = ()
) -> FactSource:
    return FactSource(
        channel=channel,
        participant_ids=people,
        sensitivity=sensitivity,
        conversation_id=conversation_id,
        learned_at=NOW - timedelta(hours=2),
    )


async def test_neighbours_are_what_the_graph_links_and_the_memory_may_show(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, environ={}).model_copy(update={"agents": [AGENT]})
    ann = new_id()
    talk, earlier, secret = new_id(), new_id(), new_id()
    opened = _record(
        "We talked in the room about a move.", conversation_id=talk, sensitivity=Sensitivity.PUBLIC
    )
    tram = _record("Lisbon has the yellow tram 28.", sensitivity=Sensitivity.PUBLIC)
    confided = _record(
        "Ann's plan for Lisbon is a secret.", DM, participant_ids=(ann,), sensitivity=Sensitivity.CONFIDENTIAL
    )
    unrelated = _record("The council voted for a bicycle lane.", sensitivity=Sensitivity.PUBLIC)
    async with opened_capability(settings, MemoryStore) as store:
        assert isinstance(store, FullStore)
        await store.ensure_agent(AGENT.id, AGENT.name, NOW)
        for record in (opened, tram, confided, unrelated):
            assert await store.add_record(record, None, None)
        public = Sensitivity.PUBLIC
        await store.upsert_graph(
            AGENT.id,
            _source(ROOM, talk, public),
            [],
            [RelationFact(source="Ann", relation="moved to", target="Lisbon")],
        )
        await store.upsert_graph(
            AGENT.id,
            _source(ROOM, earlier, public),
            [EntityFact(name="Porto")],
            [RelationFact(source="Lisbon", relation="is in", target="Portugal")],
        )
        await store.upsert_graph(
            AGENT.id,
            _source(DM, secret, Sensitivity.CONFIDENTIAL, (ann,)),
            [],
            [RelationFact(source="Ann", relation="leads", target="Project Nightingale")],
        )
        found = await memory_neighbours(settings, AGENT.id, store, opened)
        # Named in its text, not taught by its conversation: the tram memory's own neighbours.
        by_text = await memory_neighbours(settings, AGENT.id, store, tram)
        nothing = await memory_neighbours(settings, AGENT.id, store, unrelated)
        from_the_dm = await memory_neighbours(settings, AGENT.id, store, confided)
    assert found is not None and by_text is not None and nothing is not None and from_the_dm is not None
    assert [e.name for e in found.entities] == ["Ann", "Lisbon"]
    assert sorted(r.line() for r in found.relations) == ["Ann —moved to→ Lisbon", "Lisbon —is in→ Portugal"]
    assert [m.id for m in found.memories] == [tram.id]  # not the DM's confidence, not itself
    assert [e.name for e in by_text.entities] == ["Lisbon"]
    assert [m.id for m in by_text.memories] == []  # "Lisbon" names only itself and the confidence
    assert (nothing.entities, nothing.relations, nothing.memories) == ((), (), ())
    # In the DM with Ann her confidence shows; the room is another compartment.
    assert [e.name for e in from_the_dm.entities] == ["Ann"]  # Lisbon is known in the room only
    assert [r.line() for r in from_the_dm.relations] == ["Ann —leads→ Project Nightingale"]
    assert [m.id for m in from_the_dm.memories] == []
