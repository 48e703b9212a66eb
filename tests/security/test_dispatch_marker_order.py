"""A waiter in the transmitting process never returns ahead of the delivery.

The reply and its completion marker are committed in one transaction before the surface is
given the reply. A waiter that found the marker in the store (it polls every 0.1 s) or in
the in-process hand-over returned while delivery was still running: `persyn chat` could
print a prompt before the reply, and a test saw "transmitted" with nothing delivered. The
waiter now waits for the end of transmit in this process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from persyn.core.events import Event, Notice, Outbound
from persyn.gateway.base import SinkCallable
from persyn.runtime.channel import Channel as ChannelPort
from persyn.testing import ADA, run_runtime


class HeldChannel(ChannelPort):
    """Delivers only when the test lets it."""

    service = "test"
    interactive = False

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.delivered: list[str] = []

    async def deliver(self, outbound: Outbound) -> None:
        self.entered.set()
        await self.release.wait()
        self.delivered.append(outbound.text)

    async def notice(self, event: Event, notice: Notice) -> None:
        return None

    def sink_for(self, event: Event) -> SinkCallable | None:
        return None


async def test_the_waiter_returns_only_once_the_reply_is_delivered(tmp_path: Path) -> None:
    channel = HeldChannel()
    quiet = "[deliberation]\nenabled = false\n"
    async with run_runtime(tmp_path / "home", config=quiet, channels={"test": channel}) as pilot:
        try:
            event = pilot.event("hello there", speaker="ann")
            await pilot.runtime.submit(event)
            await channel.entered.wait()  # the marker is committed; the delivery is held
            assert await pilot.store.get_marker(ADA.id, event.id, pilot.clock.now()) is not None
            waiter = asyncio.create_task(pilot.runtime.wait_marker(ADA.id, event.id, timeout=60))
            await asyncio.sleep(0.5)  # several of the waiter's store reads, while delivery is held
            assert not waiter.done()
            channel.release.set()
            marker = await waiter
            assert marker.transmitted
            assert channel.delivered == ["You said: hello there"]
        finally:
            channel.release.set()
