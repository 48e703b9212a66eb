"""Shared artifacts (`store/ports/artifacts.py`), as every store must keep them: versions numbered
per artifact in order of arrival, each whole and attributed; a write based on a version that
is no longer the latest stores nothing; concurrent writers never share a number; a listing
answers only for the scopes it is asked about."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from persyn.core.ids import new_id
from persyn.store.capabilities import FullStore
from persyn.store.ports.artifacts import ArtifactVersion
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 12, 2, 9, tzinfo=UTC)
ADA, BEA = new_id(T0), new_id(T0 + timedelta(seconds=1))


def _version(
    scope: str, name: str, agent: str, content: str, at: datetime, note: str = ""
) -> ArtifactVersion:
    return ArtifactVersion(
        id=new_id(at),
        scope=scope,
        name=name,
        version=1,
        agent_id=agent,
        content=content,
        note=note,
        created_at=at,
    )


class ArtifactsContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_versions_are_numbered_attributed_and_kept_whole(self, store: FullStore) -> None:
        first = await store.add_artifact_version(
            _version("irc:#plans", "trip.md", ADA, "Day 1: Kyoto", T0), base=0
        )
        assert first is not None and first.version == 1
        second = await store.add_artifact_version(
            _version(
                "irc:#plans",
                "trip.md",
                BEA,
                "Day 1: Kyoto\nDay 2: Nara",
                T0 + timedelta(minutes=1),
                "added Nara",
            ),
            base=1,
        )
        assert second is not None and second.version == 2
        versions = await store.artifact_versions("irc:#plans", "trip.md")
        assert [(v.version, v.agent_id, v.content, v.note) for v in versions] == [
            (1, ADA, "Day 1: Kyoto", ""),
            (2, BEA, "Day 1: Kyoto\nDay 2: Nara", "added Nara"),
        ]
        assert versions[1].created_at == T0 + timedelta(minutes=1)
        # The same name in another scope is another artifact.
        assert await store.artifact_versions("irc:#other", "trip.md") == []

    async def test_a_stale_base_stores_nothing(self, store: FullStore) -> None:
        assert await store.add_artifact_version(_version("s:c", "doc", ADA, "one", T0), base=0) is not None
        assert await store.add_artifact_version(_version("s:c", "doc", BEA, "clobber", T0), base=0) is None
        assert await store.add_artifact_version(_version("s:c", "doc", BEA, "from 5", T0), base=5) is None
        assert [v.content for v in await store.artifact_versions("s:c", "doc")] == ["one"]

    async def test_concurrent_writers_get_distinct_numbers_and_one_base_wins(self, store: FullStore) -> None:
        writes = [
            store.add_artifact_version(
                _version("s:c", "log", agent, f"{agent}-{i}", T0 + timedelta(seconds=i)), base=None
            )
            for i, agent in enumerate([ADA, BEA] * 5)
        ]
        stored = await asyncio.gather(*writes)
        assert sorted(v.version for v in stored if v is not None) == list(range(1, 11))
        raced = await asyncio.gather(
            *(store.add_artifact_version(_version("s:c", "log", a, a, T0), base=10) for a in (ADA, BEA))
        )
        assert sorted(v is None for v in raced) == [False, True]
        assert len(await store.artifact_versions("s:c", "log")) == 11

    async def test_a_listing_answers_only_for_the_scopes_asked(self, store: FullStore) -> None:
        await store.add_artifact_version(_version("s:a", "x", ADA, "1", T0), base=None)
        await store.add_artifact_version(_version("s:a", "x", BEA, "2", T0 + timedelta(minutes=2)), base=None)
        await store.add_artifact_version(_version("s:a", "x", ADA, "3", T0 + timedelta(minutes=3)), base=None)
        await store.add_artifact_version(_version("s:b", "y", BEA, "1", T0 + timedelta(minutes=5)), base=None)
        await store.add_artifact_version(
            _version("s:secret", "z", ADA, "1", T0 + timedelta(minutes=9)), base=None
        )
        listed = await store.artifacts(["s:a", "s:b"])
        assert [(s.scope, s.name, s.latest, s.last_agent_id, s.versions_by_agent) for s in listed] == [
            ("s:b", "y", 1, BEA, {BEA: 1}),
            ("s:a", "x", 3, ADA, {ADA: 2, BEA: 1}),
        ]
        assert await store.artifacts([]) == []
