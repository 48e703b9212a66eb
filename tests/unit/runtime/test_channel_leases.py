"""`ChannelOwnership` (`runtime/delivery/channel_leases.py`) over a real store (each backend) and a
clock the test moves: one process connects a network, another stands by and says who holds it, takes
over once the owner stops renewing (or at once when it stops), and an owner that finds its
lease taken disconnects. The networks are recording stand-ins for a chat connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.clock import ManualClock
from persyn.runtime.channel import ConnectionState, LeasedChannel, Link, NetworkChannel
from persyn.runtime.delivery.channel_leases import ChannelOwnership, channel_lease
from persyn.store import open_store
from persyn.store.capabilities import FullStore
from persyn.store.sqlite.store import SQLiteStore

T0 = datetime(2026, 12, 6, 9, tzinfo=UTC)
TTL = 30.0


class Connection:
    """A network connection that records its lifespan; `fail` makes it refuse to start."""

    def __init__(self, log: list[str], name: str, *, fail: bool = False) -> None:
        self._log, self._name, self._fail = log, name, fail
        self.states = [ConnectionState("irc", "Ada", Link.CONNECTED, T0)]

    async def start(self) -> None:
        if self._fail:
            raise ConnectionError("refused")
        self._log.append(f"{self._name} up")

    async def stop(self) -> None:
        self._log.append(f"{self._name} down")

    def connection_states(self) -> list[ConnectionState]:
        return self.states


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[FullStore]:
    """A set-up store of each backend (PostgreSQL: what processes on several hosts share)."""
    opened = open_store(store_url)
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


def _process(
    store: FullStore | None,
    clock: ManualClock,
    name: str,
    log: list[str],
    said: list[str],
    *,
    fail: bool = False,
) -> ChannelOwnership:
    def build() -> NetworkChannel:
        return Connection(log, name, fail=fail)

    return ChannelOwnership(
        store, clock, [LeasedChannel("irc", build)], ttl_seconds=TTL, holder=name, report=said.append
    )


async def test_one_owner_a_standby_that_says_so_and_a_takeover_when_the_owner_dies(
    store: FullStore,
) -> None:
    clock = ManualClock(T0)
    log: list[str] = []
    said_a: list[str] = []
    said_b: list[str] = []
    a = _process(store, clock, "a", log, said_a)
    b = _process(store, clock, "b", log, said_b)
    await a.settle()
    await b.settle()
    assert log == ["a up"]
    assert said_a == ["irc: connected by this process (a)"]
    assert len(said_b) == 1 and said_b[0].startswith("irc: connected by a ")
    assert "serves workers only" in said_b[0]

    # The owner renews every third of the lease: the standby keeps standing by, silently.
    for _ in range(6):
        clock.advance(timedelta(seconds=TTL / 3))
        await a.settle()
        await b.settle()
    assert log == ["a up"] and len(said_b) == 1

    # The owner dies (it renews no more): the standby connects once the lease lapses.
    clock.advance(timedelta(seconds=TTL - 1))
    await b.settle()
    assert log == ["a up"]
    clock.advance(timedelta(seconds=1))
    await b.settle()
    assert log == ["a up", "b up"]
    assert [lease.holder for lease in await store.leases()] == ["b"]

    # Had it only been paused, it finds its lease taken and disconnects at once.
    await a.settle()
    assert log == ["a up", "b up", "a down"]
    assert said_a[-2] == "irc: disconnecting: b took its lease over"
    assert said_a[-1].startswith("irc: connected by b ")  # and it now stands by
    await b.stop()
    await a.stop()


async def test_each_renewal_records_how_the_connections_stand_for_other_processes(
    store: FullStore,
) -> None:
    """The lease says what the owner's connections are doing as of its last renewal: what
    `persyn doctor` and `persyn channels show` read from another process."""
    clock = ManualClock(T0)
    a = _process(store, clock, "a", [], [])
    await a.settle()  # connects; the state is written with the next renewal
    clock.advance(timedelta(seconds=TTL / 3))
    await a.settle()
    (lease,) = await store.leases()
    assert lease.state == "Ada: connected since 2026-12-06 09:00:00 UTC"
    connection = a.connected["irc"]
    assert isinstance(connection, Connection)
    lost = T0 + timedelta(seconds=12)
    connection.states = [
        ConnectionState("irc", "Ada", Link.RECONNECTING, lost, 2, "Connect call failed"),
        ConnectionState("irc", "Bo", Link.FAILING, lost, 3, "x" * 5000),
    ]
    clock.advance(timedelta(seconds=TTL / 3))
    await a.settle()
    (lease,) = await store.leases()
    first, second = lease.state.split("; ")
    assert first == "Ada: reconnecting since 2026-12-06 09:00:12 UTC (2 failed: Connect call failed)"
    assert second.startswith("Bo: failing since 2026-12-06 09:00:12 UTC (3 failed: xxx")
    assert len(lease.state) <= 2000  # an adapter's long error is cut, never refused
    # A standby's failed try changes nothing of it.
    b = _process(store, clock, "b", [], [])
    await b.settle()
    assert (await store.leases())[0].state == lease.state
    await a.stop()
    await b.stop()


async def test_an_owner_that_stops_gives_the_lease_up_for_the_next_try(store: FullStore) -> None:
    clock = ManualClock(T0)
    log: list[str] = []
    a = _process(store, clock, "a", log, [])
    b = _process(store, clock, "b", log, [])
    await a.settle()
    await b.settle()
    await a.stop()
    assert await store.leases() == []
    await b.settle()  # no waiting for a lapse
    assert log == ["a up", "a down", "b up"]
    await b.stop()
    assert log[-1] == "b down" and await store.leases() == []


async def test_a_connection_that_fails_to_start_leaves_the_lease_to_others(store: FullStore) -> None:
    clock = ManualClock(T0)
    log: list[str] = []
    broken = _process(store, clock, "broken", log, [], fail=True)
    await broken.settle()
    assert broken.connected == {} and await store.leases() == []
    healthy = _process(store, clock, "healthy", log, [])
    await healthy.settle()
    assert log == ["broken down", "healthy up"]  # the failed one was cleaned up
    assert (await store.leases())[0].name == channel_lease("irc")
    await healthy.stop()


async def test_an_owner_that_cannot_reach_the_store_disconnects_once_its_lease_lapses(
    tmp_path: Path,
) -> None:
    """The store goes away (here: closed) under a connected owner: it keeps the connection
    while its lease runs (another process cannot have taken it), and drops it once lapsed."""
    store = SQLiteStore(tmp_path / "gone.db")
    await store.setup()
    clock = ManualClock(T0)
    log: list[str] = []
    said: list[str] = []
    owner = _process(store, clock, "a", log, said)
    await owner.settle()
    await store.close()
    clock.advance(timedelta(seconds=TTL - 1))
    await owner.settle()
    assert log == ["a up"]
    clock.advance(timedelta(seconds=1))
    await owner.settle()
    assert log == ["a up", "a down"]
    assert said[-1] == "irc: disconnecting: its lease lapsed while the store was unreachable"
    await owner.stop()  # giving up a lease it no longer has, on a store that is gone: no error


async def test_doctor_names_the_holder_of_each_configured_network(tmp_path: Path) -> None:
    """`persyn doctor`'s "channel owners" line: the holder while its lease runs, that none
    connects it once lapsed or never taken; nothing for a deployment without networks."""
    from persyn.ops.doctor.channels import channel_owner_check
    from persyn.testing.harness import harness_settings

    assert await channel_owner_check(harness_settings(tmp_path / "bare"), T0) is None
    config = (
        '[channels.irc]\nserver = "127.0.0.1"\nport = 9\ntls = false\n[channels.telegram]\nenabled = true\n'
    )
    settings = harness_settings(tmp_path / "home", config=config)
    store = open_store(settings.database_url)
    await store.setup()
    try:
        await store.acquire_lease(
            channel_lease("irc"), "host-a:41:beef", T0, timedelta(seconds=TTL), "Ada: connected since 08:59"
        )
    finally:
        await store.close()
    held = await channel_owner_check(settings, T0 + timedelta(seconds=1))
    assert held is not None and held.warning  # telegram has no owner
    assert held.detail == (
        "irc: host-a:41:beef (lease runs to 09:00:30 UTC), Ada: connected since 08:59"
        " | telegram: no process connects it (start `persyn run`)"
    )
    # Both owned, one of them failing as of its owner's last renewal: a warning naming why.
    store = open_store(settings.database_url)
    await store.setup()
    try:
        failing = "ada_bot: failing since 09:00:05 (3 failed: All connection attempts failed)"
        await store.acquire_lease(
            channel_lease("telegram"), "host-b:7:cafe", T0, timedelta(seconds=TTL), failing
        )
    finally:
        await store.close()
    troubled = await channel_owner_check(settings, T0 + timedelta(seconds=6))
    assert troubled is not None and troubled.warning
    assert troubled.detail.endswith(f"telegram: host-b:7:cafe (lease runs to 09:00:30 UTC), {failing}")
    store = open_store(settings.database_url)
    await store.setup()
    try:
        await store.acquire_lease(
            channel_lease("telegram"), "host-b:7:cafe", T0, timedelta(seconds=TTL), "ada_bot: connected"
        )
    finally:
        await store.close()
    well = await channel_owner_check(settings, T0 + timedelta(seconds=7))
    assert well is not None and not well.warning
    lapsed = await channel_owner_check(settings, T0 + timedelta(seconds=TTL))
    assert lapsed is not None and lapsed.detail.startswith(
        "irc: no process connects it (host-a:41:beef stopped renewing at 09:00:30 UTC"
    )


async def test_without_channel_leases_a_process_connects_every_network_as_the_only_one() -> None:
    """A store that offers no channel leases (`store/capabilities.py`): nothing to hold, so the
    process connects what it is given, keeps it across rounds and leaves it at stop."""
    clock = ManualClock(T0)
    log: list[str] = []
    said: list[str] = []
    alone = _process(None, clock, "a", log, said)
    await alone.settle()
    clock.advance(timedelta(seconds=TTL * 2))  # no lease to lapse
    await alone.settle()
    assert log == ["a up"]
    assert said == ["irc: connected by this process (a)"]
    await alone.stop()
    assert log == ["a up", "a down"]
