"""Leases (`store/ports/leases.py`), as every store must keep them: one holder at a time, renewed
by its holder, taken over once lapsed, given up only by its holder; racing acquirers get
one winner. The clock is the caller's, so lapsing takes no waiting."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract, StoreFactory, full

T0 = datetime(2026, 12, 6, 9, tzinfo=UTC)
TTL = timedelta(seconds=30)
NAME = "channel:irc"


class LeasesContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_a_free_lease_is_taken_and_a_second_acquirer_is_refused(self, store: FullStore) -> None:
        first = await store.acquire_lease(NAME, "host-a:1:aa", T0, TTL)
        assert (first.holder, first.acquired_at, first.expires_at) == ("host-a:1:aa", T0, T0 + TTL)
        refused = await store.acquire_lease(NAME, "host-b:2:bb", T0 + timedelta(seconds=29), TTL)
        assert refused == first  # unchanged, and it says who holds it
        assert not refused.held_by("host-b:2:bb", T0 + timedelta(seconds=29))

    async def test_the_holder_renews_and_keeps_the_time_it_took_the_lease(self, store: FullStore) -> None:
        await store.acquire_lease(NAME, "a", T0, TTL)
        renewed = await store.acquire_lease(NAME, "a", T0 + timedelta(seconds=20), TTL)
        assert (renewed.holder, renewed.acquired_at, renewed.expires_at) == (
            "a",
            T0,
            T0 + timedelta(seconds=50),
        )
        # Past the first term, the renewal still holds it against another process.
        late = T0 + timedelta(seconds=40)
        assert (await store.acquire_lease(NAME, "b", late, TTL)).holder == "a"

    async def test_a_lapsed_lease_is_taken_over_and_its_old_holder_learns_it(self, store: FullStore) -> None:
        await store.acquire_lease(NAME, "a", T0, TTL)
        lapsed = T0 + TTL
        taken = await store.acquire_lease(NAME, "b", lapsed, TTL)
        assert (taken.holder, taken.acquired_at, taken.expires_at) == ("b", lapsed, lapsed + TTL)
        # The old holder's renewal finds it gone and changes nothing.
        assert await store.acquire_lease(NAME, "a", lapsed + timedelta(seconds=1), TTL) == taken

    async def test_the_holder_records_its_state_and_another_acquirer_changes_none_of_it(
        self, store: FullStore
    ) -> None:
        first = await store.acquire_lease(NAME, "a", T0, TTL, "Ada: connected")
        assert first.state == "Ada: connected"
        renewed = await store.acquire_lease(NAME, "a", T0 + timedelta(seconds=10), TTL, "Ada: reconnecting")
        assert renewed.state == "Ada: reconnecting" and renewed.acquired_at == T0
        refused = await store.acquire_lease(NAME, "b", T0 + timedelta(seconds=11), TTL, "mine")
        assert refused.holder == "a" and refused.state == "Ada: reconnecting"
        assert [lease.state for lease in await store.leases()] == ["Ada: reconnecting"]
        with pytest.raises(ValidationError):
            await store.acquire_lease(NAME, "a", T0 + timedelta(seconds=12), TTL, "x" * 2001)

    async def test_only_the_holder_releases_and_a_released_lease_is_free(self, store: FullStore) -> None:
        await store.acquire_lease(NAME, "a", T0, TTL)
        assert not await store.release_lease(NAME, "b")
        assert [lease.holder for lease in await store.leases()] == ["a"]
        assert await store.release_lease(NAME, "a")
        assert not await store.release_lease(NAME, "a")
        assert await store.leases() == []
        assert (await store.acquire_lease(NAME, "b", T0 + timedelta(seconds=1), TTL)).holder == "b"

    async def test_leases_are_independent_and_listed_by_name(self, store: FullStore) -> None:
        await store.acquire_lease("channel:telegram", "a", T0, TTL)
        await store.acquire_lease(NAME, "b", T0, TTL)
        assert [(lease.name, lease.holder) for lease in await store.leases()] == [
            (NAME, "b"),
            ("channel:telegram", "a"),
        ]

    async def test_processes_racing_for_a_free_lease_get_one_winner(
        self, store_factory: StoreFactory
    ) -> None:
        """Separate store objects (each with its own connections, as separate processes have)
        all try the same free lease at once: each sees the same single holder."""
        stores = [full(store_factory()) for _ in range(4)]
        try:
            for each in stores:
                await each.setup()
            results = await asyncio.gather(
                *(each.acquire_lease(NAME, f"p{index}", T0, TTL) for index, each in enumerate(stores))
            )
        finally:
            for each in stores:
                await each.close()
        assert len({lease.holder for lease in results}) == 1

    async def test_bad_values_are_refused_before_anything_is_written(self, store: FullStore) -> None:
        with pytest.raises(ValidationError, match="name"):
            await store.acquire_lease("", "a", T0, TTL)
        with pytest.raises(ValidationError, match="holder"):
            await store.acquire_lease(NAME, "x" * 201, T0, TTL)
        with pytest.raises(ValueError, match="ttl"):
            await store.acquire_lease(NAME, "a", T0, timedelta(0))
        assert await store.leases() == []
