"""A channel connection's state (`runtime.channel.LinkTracker`) as its connect loop tells it:
connecting until the first success, reconnecting when lost, failing once three attempts in a
row have failed, connected again (failures forgotten) on the next success; `since` moves only
when the state changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from persyn.core.clock import ManualClock
from persyn.core.events import Outbound
from persyn.runtime.channel import Channel, ConnectionState, Link

T0 = datetime(2026, 12, 7, 12, tzinfo=UTC)


class _Surface(Channel):
    service = "test"

    async def deliver(self, outbound: Outbound) -> None:
        return None


def test_the_states_a_connect_loop_walks_through() -> None:
    clock = ManualClock(T0)
    surface = _Surface()
    assert surface.connection_states() == [ConnectionState("test", "", Link.CONNECTED, None)]
    link = surface.track("ada", clock.now)
    seen: list[tuple[Link, int, datetime | None]] = []

    def step(advance: int = 1) -> None:
        clock.advance(timedelta(seconds=advance))
        (state,) = surface.connection_states()
        seen.append((state.link, state.failures, state.since))

    step()
    link.up()
    step()
    link.lost(ConnectionError("the server closed the connection"))
    step()
    link.lost(ConnectionRefusedError(111, "Connect call failed"))
    step()
    link.lost(ConnectionRefusedError(111, "Connect call failed"))
    step()
    link.lost(ConnectionRefusedError(111, "Connect call failed"))
    step()
    assert surface.connection_states()[0].detail == "[Errno 111] Connect call failed"
    link.up()
    step()
    assert seen == [
        (Link.CONNECTING, 0, T0),
        (Link.CONNECTED, 0, T0 + timedelta(seconds=1)),
        (Link.RECONNECTING, 1, T0 + timedelta(seconds=2)),
        (Link.RECONNECTING, 2, T0 + timedelta(seconds=2)),
        (Link.FAILING, 3, T0 + timedelta(seconds=4)),
        (Link.FAILING, 4, T0 + timedelta(seconds=4)),
        (Link.CONNECTED, 0, T0 + timedelta(seconds=6)),
    ]
    assert surface.connection_states()[0].detail == ""
    assert [s.name for s in surface.connection_states()] == ["ada"]
