"""`query_graph` through the agent's real registry (`ops.tools.call_tool` builds it as an
activation does): the same compartment and sensitivity rules as the graph context of a turn.
A stranger's channel learns nothing of another compartment's graph — not its relations, not
its entities' attributes, not even that an entity exists there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from persyn.core.clock import SystemClock
from persyn.core.config import Settings
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.ops.tools import call_tool
from persyn.store import open_store
from persyn.store.capabilities import require_capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import EntityFact, FactSource, RelationFact
from persyn.testing import ADA, START
from persyn.testing.harness import harness_settings
from persyn.tools.registry import ToolOutcome

ANN = new_id()


async def _settings(tmp_path: Path) -> Settings:
    settings = harness_settings(tmp_path / "home")
    store = open_store(settings.database_url)
    await store.setup()
    try:
        await store.ensure_agent(ADA.id, ADA.name, START)
        await require_capability(store, GraphPort).upsert_graph(
            ADA.id,
            FactSource(
                channel="test:ann-dm",
                participant_ids=(ANN,),
                sensitivity=Sensitivity.PRIVATE,
                learned_at=START,
            ),
            [EntityFact(name="Ann", kind="person", attributes={"role": "night-shift nurse"})],
            [
                RelationFact(source="Ann", relation="works_at", target="Saint Jude Clinic"),
                RelationFact(source="Saint Jude Clinic", relation="located_in", target="Berlin"),
            ],
        )
        await require_capability(store, GraphPort).upsert_graph(
            ADA.id,
            FactSource(channel="test:lobby", sensitivity=Sensitivity.PUBLIC, learned_at=START),
            [],
            [RelationFact(source="Lobby Cat", relation="likes", target="Tuna")],
        )
    finally:
        await store.close()
    return settings


async def _query(settings: Settings, channel: str, **args: Any) -> ToolOutcome:
    return await call_tool(settings, ADA, SystemClock(), "query_graph", args, channel=channel)


async def test_the_compartment_where_it_was_learned_sees_the_neighbourhood_and_paths(tmp_path: Path) -> None:
    settings = await _settings(tmp_path)
    around = await _query(settings, "test:ann-dm", entity="ann", hops=2)
    assert around.ok, around.content
    assert around.output == {
        "entity": {"name": "Ann", "kind": "person", "attributes": {"role": "night-shift nurse"}},
        "other": None,
        "relations": ["Ann —works at→ Saint Jude Clinic", "Saint Jude Clinic —located in→ Berlin"],
        "connected": None,
    }
    path = await _query(settings, "test:ann-dm", entity="Ann", other="Berlin")
    assert path.ok and path.output is not None and path.output["connected"] is True
    assert path.output["relations"] == [
        "Ann —works at→ Saint Jude Clinic",
        "Saint Jude Clinic —located in→ Berlin",
    ]
    by_fragment = await _query(settings, "test:ann-dm", entity="Jude")
    assert by_fragment.ok and by_fragment.output is not None
    assert by_fragment.output["entity"]["name"] == "Saint Jude Clinic"


async def test_a_strangers_channel_cannot_read_another_compartments_graph(tmp_path: Path) -> None:
    settings = await _settings(tmp_path)
    nothing = await _query(settings, "test:stranger", entity="Zebulon the Unknown")
    assert not nothing.ok
    for name in ("Ann", "Saint Jude Clinic", "Berlin", "Jude", "Lobby Cat"):
        refused = await _query(settings, "test:stranger", entity=name, hops=3)
        assert not refused.ok and refused.output is None
        # Worded exactly as for an entity that does not exist: no hint that it exists elsewhere.
        assert refused.content == nothing.content.replace("Zebulon the Unknown", name)
    path = await _query(settings, "test:stranger", entity="Ann", other="Berlin")
    assert not path.ok and "night-shift" not in path.content and "works at" not in path.content
    # The public lobby's own compartment sees its fact, and still nothing of Ann's.
    lobby = await _query(settings, "test:lobby", entity="Lobby Cat")
    assert lobby.ok and lobby.output is not None and lobby.output["relations"] == ["Lobby Cat —likes→ Tuna"]
    assert not (await _query(settings, "test:lobby", entity="Ann")).ok


async def test_a_channel_grouped_with_it_shares_the_graph_and_bad_input_is_refused(tmp_path: Path) -> None:
    settings = await _settings(tmp_path)
    grouped = settings.model_copy(
        update={
            "memory": settings.memory.model_copy(update={"channel_groups": [["test:ann-dm", "test:ann-sms"]]})
        }
    )
    shared = await _query(grouped, "test:ann-sms", entity="Ann")
    assert (
        shared.ok
        and shared.output is not None
        and shared.output["relations"] == ["Ann —works at→ Saint Jude Clinic"]
    )
    too_far = await _query(settings, "test:ann-dm", entity="Ann", hops=9)
    assert too_far.status.value == "invalid_arguments"
