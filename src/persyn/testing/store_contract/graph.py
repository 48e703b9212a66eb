"""The knowledge graph (SPEC §4.3) as every store must keep it: upserts without duplicates,
n-hop neighbourhoods and shortest paths, and the compartment rules of memories."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory.access import eligible_channels, may_surface
from persyn.store.capabilities import FullStore
from persyn.store.ports.graph_rows import EntityFact, FactSource, GraphView, RelationFact, entity_key
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
ROOM = "slack:general"
DM = "slack:dm-ann"


def _source(
    channel: str = ROOM,
    people: tuple[str, ...] = (),
    sensitivity: Sensitivity = Sensitivity.PUBLIC,
    **kw: object,
) -> FactSource:
    return FactSource(channel=channel, participant_ids=people, sensitivity=sensitivity, learned_at=T0, **kw)  # type: ignore[arg-type]


def _view(channel: str, present: tuple[str, ...] = (), groups: list[list[str]] | None = None) -> GraphView:
    return GraphView(channel=channel, eligible=eligible_channels(channel, groups or []), present=present)


async def _ids(store: FullStore, agent_id: str, *names: str) -> list[str]:
    found = await store.graph_entities(agent_id, [entity_key(n) for n in names], None)
    by_key = {entity_key(e.name): e.id for e in found}
    return [by_key[entity_key(n)] for n in names]


class GraphContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    def test_entity_keys_normalise_names(self) -> None:
        assert entity_key("The  Acme Corp.") == entity_key("acme corp") == "acme corp"
        assert entity_key("  'Zoë'  ") == "zoë"
        assert entity_key("The Who") == "the who" != entity_key("who")  # not every question's "who"
        with pytest.raises(InputError):
            entity_key(" ... ")

    async def test_upsert_never_duplicates_and_merges_what_it_learns(self, store: FullStore) -> None:
        agent_id = new_id()
        first = await store.upsert_graph(
            agent_id,
            _source(),
            [EntityFact(name="Ann", kind="person", attributes={"city": "Lisbon"})],
            [RelationFact(source="Ann", relation="works at", target="The Acme Corp.")],
        )
        assert (first.entities_added, first.mentions_added, first.relations_added) == (2, 2, 1)
        again = await store.upsert_graph(
            agent_id,
            _source(),
            [
                EntityFact(name="ann", attributes={"role": "engineer"}),
                EntityFact(name="acme corp", kind="company"),
            ],
            [RelationFact(source="ANN", relation="Works_At", target="Acme Corp")],
        )
        assert (again.entities_added, again.mentions_added, again.relations_added) == (0, 0, 0)
        assert again.refreshed == 3
        assert await store.graph_stats(agent_id) == {"entities": 2, "mentions": 2, "relations": 1}
        acme, ann = await store.graph_entities(agent_id, ["ann", "acme corp"], None)  # by key
        assert ann.name == "Ann" and ann.kind == "person"
        assert ann.attributes == {"city": "Lisbon", "role": "engineer"}
        assert acme.name == "The Acme Corp." and acme.kind == "company"  # a vague kind is sharpened
        # Another agent shares nothing.
        assert await store.graph_entities(new_id(), ["ann"], None) == []

    async def test_bad_facts_store_nothing(self, store: FullStore) -> None:
        agent_id = new_id()
        for relations in (
            [
                RelationFact(source="Ann", relation="knows", target="Bo"),
                RelationFact(source="Bo", relation="!!", target="Cy"),
            ],
            [RelationFact(source="Ann Smith", relation="is", target="the ann smith")],
            [RelationFact(source="Ann", relation="knows", target="x" * 300)],
        ):
            with pytest.raises(InputError):
                await store.upsert_graph(agent_id, _source(), [EntityFact(name="Dee")], relations)
        with pytest.raises(InputError):
            await store.upsert_graph(agent_id, _source(people=("not-an-id",)), [EntityFact(name="Dee")], [])
        assert await store.graph_stats(agent_id) == {"entities": 0, "mentions": 0, "relations": 0}

    async def test_neighbourhood_walks_n_hops_in_either_direction_and_survives_cycles(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        chain = [
            RelationFact(source="Ann", relation="knows", target="Bo"),
            RelationFact(source="Cy", relation="mentors", target="Bo"),  # points back: still one hop
            RelationFact(source="Cy", relation="lives in", target="Porto"),
            RelationFact(source="Porto", relation="near", target="Ann"),  # a cycle
            RelationFact(source="Porto", relation="in", target="Portugal"),
        ]
        await store.upsert_graph(agent_id, _source(), [], chain)
        ann, bo, cy, porto, portugal = await _ids(store, agent_id, "Ann", "Bo", "Cy", "Porto", "Portugal")

        one = await store.graph_neighbourhood(agent_id, [ann], 1, None)
        assert {e.id: e.depth for e in one.entities} == {ann: 0, bo: 1, porto: 1}
        assert {r.line() for r in one.relations} == {"Ann —knows→ Bo", "Porto —near→ Ann"}

        two = await store.graph_neighbourhood(agent_id, [ann], 2, None)
        assert {e.id: e.depth for e in two.entities} == {ann: 0, bo: 1, porto: 1, cy: 2, portugal: 2}
        assert len(two.relations) == 5
        assert {r.line() for r in two.relations[:2]} == {
            "Ann —knows→ Bo",
            "Porto —near→ Ann",
        }  # nearest first

        capped = await store.graph_neighbourhood(agent_id, [ann], 2, None, limit=2)
        assert len(capped.relations) == 2
        assert (await store.graph_neighbourhood(agent_id, [ann], 0, None)).relations == ()
        with pytest.raises(InputError):
            await store.graph_neighbourhood(agent_id, [ann], 99, None)

    async def test_shortest_path_prefers_fewer_hops(self, store: FullStore) -> None:
        agent_id = new_id()
        await store.upsert_graph(
            agent_id,
            _source(),
            [EntityFact(name="Island")],
            [
                RelationFact(source="Ann", relation="knows", target="Bo"),
                RelationFact(source="Bo", relation="knows", target="Cy"),
                RelationFact(source="Cy", relation="knows", target="Dee"),
                RelationFact(source="Ann", relation="sibling of", target="Eve"),
                RelationFact(source="Dee", relation="married to", target="Eve"),
            ],
        )
        ann, dee, cy, island = await _ids(store, agent_id, "Ann", "Dee", "Cy", "Island")
        path = await store.graph_path(agent_id, ann, dee, None, 4)
        assert path is not None
        assert [r.line() for r in path] == ["Ann —sibling of→ Eve", "Dee —married to→ Eve"]
        assert [r.line() for r in await store.graph_path(agent_id, ann, cy, None, 4) or []] == [
            "Ann —knows→ Bo",
            "Bo —knows→ Cy",
        ]
        assert await store.graph_path(agent_id, ann, cy, None, 1) is None  # too far
        assert await store.graph_path(agent_id, ann, island, None, 6) is None  # not connected
        assert await store.graph_path(agent_id, ann, ann, None, 2) == []

    async def test_a_private_fact_never_surfaces_elsewhere_nor_bridges(self, store: FullStore) -> None:
        agent_id = new_id()
        ann, bo = new_id(), new_id()
        await store.upsert_graph(
            agent_id, _source(ROOM), [], [RelationFact(source="Ann", relation="knows", target="Bo")]
        )
        await store.upsert_graph(
            agent_id,
            _source(DM, (ann,), Sensitivity.CONFIDENTIAL),
            [EntityFact(name="Project Nightingale", attributes={"budget": "secret"})],
            [RelationFact(source="Bo", relation="leads", target="Project Nightingale")],
        )
        await store.upsert_graph(
            agent_id, _source(ROOM), [EntityFact(name="Bo", attributes={"team": "blue"})], []
        )
        a, b, project = await _ids(store, agent_id, "Ann", "Bo", "Project Nightingale")
        room = _view(ROOM, (ann, bo))
        assert await store.graph_entities(agent_id, ["project nightingale"], room) == []
        assert await store.search_entities(agent_id, "nightingale", room) == []
        seen = await store.graph_neighbourhood(agent_id, [a, b, project], 3, room)
        assert {e.name for e in seen.entities} == {"Ann", "Bo"}
        assert [e.attributes for e in seen.entities if e.name == "Bo"] == [{"team": "blue"}]
        assert await store.graph_path(agent_id, a, project, room, 4) is None
        # Grouping the channels does not widen a confidence; in the DM with Ann it is there.
        grouped = _view(ROOM, (ann,), [[ROOM, DM]])
        assert await store.graph_path(agent_id, a, project, grouped, 4) is None
        dm = _view(DM, (ann,))
        assert [r.line() for r in await store.graph_path(agent_id, b, project, dm, 4) or []] == [
            "Bo —leads→ Project Nightingale"
        ]
        assert (await store.graph_entities(agent_id, ["project nightingale"], dm))[0].attributes == {
            "budget": "secret"
        }

    async def test_conversation_entities_are_what_a_conversation_taught_and_visible(
        self, store: FullStore
    ) -> None:
        agent_id = new_id()
        ann = new_id()
        talk, other, secret = new_id(), new_id(), new_id()
        await store.upsert_graph(
            agent_id,
            _source(ROOM, conversation_id=talk),
            [EntityFact(name="Lisbon", kind="place")],
            [RelationFact(source="Ann", relation="moved to", target="Lisbon")],
        )
        await store.upsert_graph(
            agent_id, _source(ROOM, conversation_id=other), [EntityFact(name="Porto")], []
        )
        await store.upsert_graph(
            agent_id,
            _source(DM, (ann,), Sensitivity.CONFIDENTIAL, conversation_id=secret),
            [EntityFact(name="Project Nightingale")],
            [RelationFact(source="Ann", relation="leads", target="Project Nightingale")],
        )
        found = await store.conversation_entities(agent_id, [talk], None)
        assert [(e.name, e.kind) for e in found] == [("Ann", "thing"), ("Lisbon", "place")]
        both = await store.conversation_entities(agent_id, [talk, other], _view(ROOM))
        assert [e.name for e in both] == ["Ann", "Lisbon", "Porto"]
        assert [e.name for e in await store.conversation_entities(agent_id, [talk, other], None, 2)] == [
            "Ann",
            "Lisbon",
        ]
        # A confidence stays in its DM: seen from the room, the DM's conversation taught nothing.
        assert await store.conversation_entities(agent_id, [secret], _view(ROOM, (ann,))) == []
        assert [e.name for e in await store.conversation_entities(agent_id, [secret], _view(DM, (ann,)))] == [
            "Ann",
            "Project Nightingale",
        ]
        assert await store.conversation_entities(agent_id, [new_id()], None) == []
        assert await store.conversation_entities(agent_id, [], None) == []

    async def test_visibility_matches_the_memory_policy_exhaustively(self, store: FullStore) -> None:
        """Every provenance x every situation: a relation (and its entities) surfaces exactly
        when a memory with the same provenance may (memory.access.may_surface)."""
        agent_id = new_id()
        p1, p2, p3 = sorted(new_id() for _ in range(3))
        channels = ("svc:a", "svc:b")
        provenances = list(itertools.product(channels, list(Sensitivity), [(), (p1,), (p1, p2)]))
        expected_by_name: dict[str, tuple[str, Sensitivity, tuple[str, ...]]] = {}
        for n, (channel, sensitivity, people) in enumerate(provenances):
            source = FactSource(
                channel=channel,
                participant_ids=people,
                sensitivity=sensitivity,
                learned_at=T0 + timedelta(minutes=n),
            )
            await store.upsert_graph(
                agent_id,
                source,
                [EntityFact(name="Hub", kind=f"kind{n}", attributes={f"a{n}": "v"})],
                [RelationFact(source=f"x{n}", relation="r", target=f"y{n}")],
            )
            expected_by_name[f"x{n}"] = (channel, sensitivity, people)
        everything = await store.graph_entities(
            agent_id, [entity_key(f"{s}{n}") for n in range(len(provenances)) for s in "xy"], None
        )
        all_ids = [e.id for e in everything]
        checked = 0
        for now, groups, present in itertools.product(
            ("svc:a", "svc:b", "svc:c"),
            ([], [["svc:a", "svc:b"]]),
            [c for k in range(4) for c in itertools.combinations((p1, p2, p3), k)],
        ):
            view = _view(now, present, groups)
            shown = await store.graph_neighbourhood(agent_id, all_ids, 1, view, limit=1000)
            visible = {r.source for r in shown.relations}
            entities = {
                e.name
                for e in await store.graph_entities(agent_id, [entity_key(n) for n in expected_by_name], view)
            }
            hub = await store.graph_entities(agent_id, ["hub"], view)
            found_hub = await store.search_entities(agent_id, "hu", view)
            allowed_numbers: set[str] = set()
            for name, (channel, sensitivity, people) in expected_by_name.items():
                record = MemoryRecord(
                    id=new_id(T0),
                    agent_id=agent_id,
                    created_at=T0,
                    channel=channel,
                    participant_ids=people,
                    summary="-",
                    sensitivity=sensitivity,
                )
                allowed = may_surface(record, now, present, groups)
                assert (name in visible) is allowed, (
                    name,
                    channel,
                    sensitivity,
                    people,
                    now,
                    groups,
                    present,
                )
                assert (name in entities) is allowed
                if allowed:
                    allowed_numbers.add(name[1:])
                checked += 1
            # The shared entity shows only what was learned where this view may see it.
            if allowed_numbers:
                (seen,) = hub
                assert set(seen.attributes) == {f"a{n}" for n in allowed_numbers}
                assert seen.kind in {f"kind{n}" for n in allowed_numbers}
                assert [e.name for e in found_hub] == ["Hub"]
            else:
                assert hub == [] and found_hub == []
            for n in ("0", "5", "17"):
                x, y = (e.id for e in everything if e.name in (f"x{n}", f"y{n}"))
                path = await store.graph_path(agent_id, x, y, view, 2)
                assert (path is not None) is (n in allowed_numbers)
        assert checked == 24 * 3 * 2 * 8

    async def test_merge_moves_graph_provenance_to_the_survivor(self, store: FullStore) -> None:
        agent_id = new_id()
        from persyn.store import Identity

        sam = await store.resolve_person(
            agent_id, Identity(service="a", channel="x", speaker_id="s"), "Sam", "human", T0
        )
        other = await store.resolve_person(
            agent_id, Identity(service="b", channel="y", speaker_id="s"), "Samuel", "human", T0
        )
        await store.upsert_graph(
            agent_id,
            _source(DM, (other.id,), Sensitivity.PRIVATE),
            [],
            [RelationFact(source="Sam", relation="plays", target="cello")],
        )
        # Before: the fact is for Samuel's ears only; Sam is a stranger to it.
        assert await store.graph_entities(agent_id, ["cello"], _view(DM, (sam.id,))) == []
        await store.merge_persons(agent_id, sam.id, other.id)
        assert [e.name for e in await store.graph_entities(agent_id, ["cello"], _view(DM, (sam.id,)))] == [
            "cello"
        ]
        # Learning it again with the survivor present refreshes the same relation.
        again = await store.upsert_graph(
            agent_id,
            _source(DM, (sam.id,), Sensitivity.PRIVATE),
            [],
            [RelationFact(source="Sam", relation="plays", target="cello")],
        )
        assert again.relations_added == 0 and (await store.graph_stats(agent_id))["relations"] == 1

    async def test_a_merge_folds_a_fact_learned_with_each_record_into_one(self, store: FullStore) -> None:
        from persyn.store import Identity

        agent_id = new_id()
        sam = await store.resolve_person(
            agent_id, Identity(service="a", channel="x", speaker_id="s"), "Sam", "human", T0
        )
        other = await store.resolve_person(
            agent_id, Identity(service="b", channel="y", speaker_id="s"), "Samuel", "human", T0
        )
        for person, city, at in ((sam.id, "Lisbon", T0), (other.id, "Porto", T0 + timedelta(days=1))):
            await store.upsert_graph(
                agent_id,
                FactSource(
                    channel=DM, participant_ids=(person,), sensitivity=Sensitivity.PRIVATE, learned_at=at
                ),
                [EntityFact(name="Sam", kind="person", attributes={"city": city})],
                [RelationFact(source="Sam", relation="plays", target="cello")],
            )
        assert (await store.graph_stats(agent_id))["relations"] == 2
        await store.merge_persons(agent_id, sam.id, other.id)
        assert await store.graph_stats(agent_id) == {"entities": 2, "mentions": 2, "relations": 1}
        view = _view(DM, (sam.id,))
        (person,) = await store.graph_entities(agent_id, ["sam"], view)
        assert person.attributes == {"city": "Porto"}  # the newer learning wins
        around = await store.graph_neighbourhood(agent_id, [person.id], 1, view)
        assert [r.line() for r in around.relations] == ["Sam —plays→ cello"]

    async def test_relearning_out_of_order_never_lets_the_older_fact_win(self, store: FullStore) -> None:
        agent_id = new_id()
        naive = datetime(2026, 11, 30, 12)  # no zone: UTC
        await store.upsert_graph(
            agent_id,
            FactSource(channel=ROOM, learned_at=naive),
            [EntityFact(name="Ann", attributes={"city": "Porto"})],
            [],
        )
        await store.upsert_graph(
            agent_id,
            FactSource(channel=ROOM, learned_at=T0),  # earlier (09:00 UTC), extracted later
            [EntityFact(name="Ann", kind="person", attributes={"city": "Lisbon", "job": "nurse"})],
            [],
        )
        (ann,) = await store.graph_entities(agent_id, ["ann"], None)
        assert ann.attributes == {"city": "Porto", "job": "nurse"} and ann.kind == "person"
