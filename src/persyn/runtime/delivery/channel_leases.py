"""Which process connects each chat network (ARCHITECTURE §14): one owner per deployment.

Two `persyn run` on one store would otherwise both join IRC (as `Bo` and `Bo_`), store every
room line twice and answer each other. So each configured network is leased in the store
(`store/ports/leases.py`, name `channel:<service>`): the process holding the lease connects it, and
renews the lease every third of `[dispatch] channel_lease_seconds`; every other process
serves workers only for that network, says so once, and tries the lease at the same pace.
An owner that stops gives the lease up, and the next try takes it over; one that dies (kill
-9, a lost host) stops renewing, and another takes over once the lease lapses: within the
lease's length and a third of it. Each renewal records how the network's connections stand
(`Lease.state`, `describe_states`), so `persyn doctor` and `persyn channels show` in another
process show "connected since …", "reconnecting since … (3 failed: …)" as of the last renewal.

An owner that loses its lease (its renewals were late, a paused host) disconnects at once;
one that cannot reach the store keeps its connection until its own clock says the lease
lapsed, then disconnects, since another process may take it from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from persyn.core.clock import Clock
from persyn.runtime.channel import LeasedChannel, NetworkChannel, describe_states
from persyn.store.ports.leases import MAX_LEASE_STATE, Lease, LeasesPort

__all__ = ["CHANNEL_LEASE_PREFIX", "ChannelOwnership", "channel_lease", "process_holder"]

log = logging.getLogger(__name__)

CHANNEL_LEASE_PREFIX = "channel:"


def channel_lease(service: str) -> str:
    return CHANNEL_LEASE_PREFIX + service


def process_holder() -> str:
    """This process as a lease holder: host and pid for the operator to find it, and a
    random part so a restarted process with the same pid (pid 1 in a container) is another
    holder, never the dead one renewing."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class ChannelOwnership:
    """Connects the networks of `channels` whose lease this process holds, and only those.
    `start` tries every lease once (so what this process connects is known when it returns),
    then keeps trying in the background; `stop` disconnects and gives the leases up.
    `settle` is one such round, for a test to drive with a clock it moves.

    `store` None is a store without channel leases (`store/capabilities.py`): this process
    then connects every network, as the only one (`persyn doctor` names the missing capability,
    so an operator running two processes on such a store learns why both joined)."""

    def __init__(
        self,
        store: LeasesPort | None,
        clock: Clock,
        channels: Sequence[LeasedChannel],
        *,
        ttl_seconds: float,
        holder: str | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._channels = list(channels)
        self._ttl = timedelta(seconds=ttl_seconds)
        self.holder = holder or process_holder()
        self._report = report or (lambda line: None)
        self.connected: dict[str, NetworkChannel] = {}
        self._until: dict[str, datetime] = {}  # when each lease held here lapses
        self._elsewhere: dict[str, str] = {}  # the holder last reported for a lease held elsewhere
        self._failing: set[str] = set()  # leases whose last try failed (logged once)
        self._task: asyncio.Task[None] | None = None

    @property
    def period_seconds(self) -> float:
        return self._ttl.total_seconds() / 3

    async def start(self) -> None:
        await self.settle()
        if self._channels:
            self._task = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.period_seconds)
            await self.settle()

    async def settle(self) -> None:
        """Try each lease once: connect what this process now holds, disconnect what it lost."""
        for channel in self._channels:
            try:
                await self._settle(channel)
            except Exception as exc:  # one network's trouble never stops the others' renewals
                log.warning("%s: settling its connection failed: %s", channel.service, exc)

    async def _settle(self, channel: LeasedChannel) -> None:
        service, now = channel.service, self._clock.now()
        if self._store is None:
            if service not in self.connected:
                await self._connect(channel)
            return
        held = self.connected.get(service)
        state = "" if held is None else _state_line(held)
        try:
            lease = await self._store.acquire_lease(
                channel_lease(service), self.holder, now, self._ttl, state
            )
        except Exception as exc:  # the store is away: keep what we hold until it lapses
            if service not in self._failing:
                self._failing.add(service)
                log.warning("%s: the connection's lease could not be renewed: %s", service, exc)
            if service in self.connected and now >= self._until[service]:
                await self._disconnect(service, "its lease lapsed while the store was unreachable")
            return
        self._failing.discard(service)
        if lease.holder == self.holder:
            self._until[service] = lease.expires_at
            self._elsewhere.pop(service, None)
            if service not in self.connected:
                await self._connect(channel)
            return
        if service in self.connected:
            await self._disconnect(service, f"{lease.holder} took its lease over")
        if self._elsewhere.get(service) != lease.holder:
            self._elsewhere[service] = lease.holder
            self._report(_standby_line(service, lease, self._ttl))

    async def _connect(self, channel: LeasedChannel) -> None:
        built = channel.build()
        try:
            await built.start()
        except Exception as exc:
            log.warning("%s: connecting failed: %s", channel.service, exc)
            with contextlib.suppress(Exception):
                await built.stop()
            if self._store is not None:
                with contextlib.suppress(Exception):  # so another process may try it meanwhile
                    await self._store.release_lease(channel_lease(channel.service), self.holder)
            return
        self.connected[channel.service] = built
        self._report(f"{channel.service}: connected by this process ({self.holder})")

    async def _disconnect(self, service: str, why: str) -> None:
        channel = self.connected.pop(service)
        self._until.pop(service, None)
        self._report(f"{service}: disconnecting: {why}")
        with contextlib.suppress(Exception):
            await channel.stop()

    async def stop(self) -> None:
        """Disconnect every network connected here, then give their leases up, so another
        process takes them over at its next try instead of waiting for them to lapse."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        for service in list(self.connected):
            channel = self.connected.pop(service)
            with contextlib.suppress(Exception):
                await channel.stop()
            if self._store is None:
                continue
            try:
                await self._store.release_lease(channel_lease(service), self.holder)
            except Exception as exc:  # it lapses on its own
                log.warning("%s: giving its lease up failed (it lapses on its own): %s", service, exc)
        self._until.clear()


def _state_line(channel: NetworkChannel) -> str:
    """What a renewal records of the network's connections (`Lease.state`), bounded."""
    try:
        line = describe_states(channel.connection_states())
    except Exception as exc:  # an adapter that cannot say never stops the renewal
        line = f"unknown ({type(exc).__name__})"
    return line[:MAX_LEASE_STATE]


def _standby_line(service: str, lease: Lease, ttl: timedelta) -> str:
    bound = round(ttl.total_seconds() * 4 / 3, 1)
    return (
        f"{service}: connected by {lease.holder} (its lease runs to {lease.expires_at:%H:%M:%S} UTC); "
        f"this process serves workers only for {service}, and connects it within {bound:g} s "
        "if that process stops"
    )
