"""The outbox's writer and deliverer (ARCHITECTURE §3): messages reach their
channel whichever process sends them.

Whatever the agent sends — a transmitted reply, a message it initiates — is written to the
store's outbox (`store/ports/outbox.py`) before any surface sees it, under an id derived from what
sends it (`reply_key`, `send_key`), so a replayed transmit step writes the same row. Then
each process delivers the rows for the channels connected *in it*:

- at once, for a row it wrote itself (`send`);
- on connecting a channel, everything that waited for it, oldest first, marked
  `while_away` (`attach`);
- every `[dispatch] outbox_poll_seconds`, rows other processes wrote (`run`): the daemon's
  reminder for the operator, a reply a worker elsewhere transmitted.

A row is marked delivered only after the channel took it; a failure is counted and the
row retried on the next pass (the rows behind it wait, so the order written holds). Two
deliverers may both hand a row over before either marks it: delivery is at least once, and
`Channel.deliver_outbound` shows an id once per channel. Deliveries for one (service,
agent) are serialised in this process, so a reply is never shown both directly and from the
poll. A row whose channel is connected nowhere stays pending until one connects (or
`[dispatch] outbox_keep_days` pass).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta

from persyn.core.clock import Clock
from persyn.core.events import ImageAttachment, Outbound
from persyn.core.ids import derived_id, id_time, new_id
from persyn.runtime.channel import Channel
from persyn.store.ports.outbox import OutboxPort, OutboxRow

__all__ = ["Outbox", "reply_key", "send_key"]

log = logging.getLogger(__name__)

_BATCH = 100
_PURGE_EVERY = timedelta(hours=1)


def reply_key(event_id: str) -> str:
    """The outbox id of the reply to `event_id` (one reply per event)."""
    return derived_id(id_time(event_id), event_id, "outbox", "reply")


def send_key(event_id: str, call_key: str | None, now: datetime) -> str:
    """The outbox id of a message run `event_id` initiated with the tool call `call_key`
    (a re-run of that call's step writes the same row); without a call key, a fresh one."""
    if call_key is None:
        return new_id(now)
    return derived_id(id_time(event_id), event_id, "outbox", "send", call_key)


class Outbox:
    """Writes rows and delivers them to the channels connected in this process.

    `channels` is the live lookup of connected channels by service (the runtime's)."""

    def __init__(
        self,
        store: OutboxPort,
        clock: Clock,
        channels: Callable[[str], Channel | None],
        *,
        keep: timedelta = timedelta(days=30),
    ) -> None:
        self._store = store
        self._clock = clock
        self._channels = channels
        self._keep = keep
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._purged_at: datetime | None = None
        # Tells the other processes a row waits for a channel not connected here (set by the
        # runtime where a live bus relays, PostgreSQL or Redis: `runtime/delivery/bus.py`); their poll
        # finds it otherwise.
        self.announcer: Callable[[str, str], Awaitable[None]] | None = None
        # The images a row's text names that its channel may see (`runtime/turn/images.py`; set
        # when `[images]` is configured): attached to the outbound message.
        self.images: Callable[[OutboxRow], tuple[ImageAttachment, ...]] | None = None

    @staticmethod
    def row(outbound: Outbound, row_id: str, now: datetime) -> OutboxRow:
        """The row of `outbound` under `row_id`, for a store transaction to write
        (`Store.record_reply`)."""
        return OutboxRow(
            id=row_id,
            agent_id=outbound.agent_id,
            service=outbound.service,
            channel=outbound.channel,
            conversation_id=outbound.conversation_id,
            message_id=outbound.message_id,
            event_id=outbound.event_id,
            text=outbound.text,
            created_at=now,
        )

    async def write(self, outbound: Outbound, row_id: str, now: datetime) -> OutboxRow:
        """Write `outbound` under `row_id` (kept as first written if it exists)."""
        return await self._store.put_outbox(self.row(outbound, row_id, now))

    async def send(self, outbound: Outbound, row_id: str, now: datetime) -> bool:
        """Write, then deliver at once if the channel is connected here. True when this
        row has been delivered (now or before)."""
        row = await self.write(outbound, row_id, now)
        if row.delivered_at is not None:
            return True  # a replayed step: shown the first time
        await self.deliver(row.service, row.agent_id)
        stored = await self._store.get_outbox(row.agent_id, row.id)
        return stored is not None and stored.delivered_at is not None

    async def deliver(self, service: str, agent_id: str) -> int:
        """`flush` a row just written; if its channel is not connected here, announce it to
        the processes where it may be."""
        channel = self._channels(service)
        if (channel is None or not channel.serves(agent_id)) and self.announcer is not None:
            try:
                await self.announcer(service, agent_id)
            except Exception as exc:  # best-effort: the other processes' poll finds the row
                log.warning("could not announce an outbox row for %s: %s", service, exc)
        return await self.flush(service, agent_id)

    async def flush(self, service: str, agent_id: str, *, while_away: bool = False) -> int:
        """Deliver `agent_id`'s pending rows for `service`, oldest first, if a channel that
        serves the agent is connected here. Order holds per conversation channel: after a
        failure the later rows of that channel wait (retried on the next pass), while other
        channels' rows still go — one chat that refuses everything (a person who blocked
        the bot, a room the agent was banned from) must not silence the agent everywhere
        else on the service. Returns how many were delivered."""
        channel = self._channels(service)
        if channel is None or not channel.serves(agent_id):
            return 0
        lock = self._locks.setdefault((service, agent_id), asyncio.Lock())
        delivered = 0
        async with lock:
            held: set[str] = set()  # channels whose oldest pending row just failed
            while True:
                rows = await self._store.pending_outbox(agent_id, service, limit=_BATCH)
                for row in rows:
                    if row.channel in held:
                        continue
                    if await self._hand_over(channel, row, while_away):
                        delivered += 1
                    else:
                        held.add(row.channel)
                # Held rows stay pending, so a full batch with some held is read once only.
                if len(rows) < _BATCH or held:
                    return delivered

    def _images(self, row: OutboxRow) -> tuple[ImageAttachment, ...]:
        if self.images is None:
            return ()
        try:
            return self.images(row)
        except Exception as exc:  # the words still go; the text names the image
            log.warning("could not attach the images of outbox row %s: %r", row.id, exc)
            return ()

    async def _hand_over(self, channel: Channel, row: OutboxRow, while_away: bool) -> bool:
        outbound = Outbound(
            event_id=row.event_id,
            agent_id=row.agent_id,
            service=row.service,
            channel=row.channel,
            conversation_id=row.conversation_id,
            message_id=row.message_id,
            text=row.text,
            outbox_id=row.id,
            sent_at=row.created_at,
            while_away=while_away,
            images=self._images(row),
        )
        try:
            await channel.deliver_outbound(outbound)
        except Exception as exc:  # the surface failed: the row stays pending, retried later
            log.warning("channel %s failed to deliver outbox row %s: %r", row.service, row.id, exc)
            try:
                await self._store.outbox_failed(row.agent_id, row.id, f"{type(exc).__name__}: {exc}")
            except Exception as store_exc:
                log.warning("could not record the failed delivery of %s: %s", row.id, store_exc)
            return False
        try:
            await self._store.mark_outbox_delivered(row.agent_id, row.id, self._clock.now())
        except Exception as exc:  # shown, not recorded: the row stays pending (at least once)
            log.warning("outbox row %s was delivered but could not be marked: %s", row.id, exc)
        return True

    async def attach(self, channel: Channel, agent_ids: Iterable[str]) -> int:
        """`channel` has just connected: deliver what waited for it, marked as such."""
        delivered = 0
        for agent_id in agent_ids:
            delivered += await self.flush(channel.service, agent_id, while_away=True)
        return delivered

    async def poll(self, services: Iterable[str], agent_ids: Iterable[str]) -> int:
        """One pass over the connected services; drops rows past their keeping time hourly."""
        agents = list(agent_ids)
        delivered = 0
        for service in list(services):
            for agent_id in agents:
                delivered += await self.flush(service, agent_id)
        now = self._clock.now()
        if self._purged_at is None or now - self._purged_at >= _PURGE_EVERY:
            self._purged_at = now
            purged = await self._store.purge_outbox(now - self._keep)
            if purged:
                log.info("dropped %d outbox rows older than %s", purged, self._keep)
        return delivered

    async def run(
        self, services: Callable[[], Iterable[str]], agent_ids: Iterable[str], every: float
    ) -> None:
        """Poll until cancelled; a failing pass is logged and the next one tries again."""
        agents = list(agent_ids)
        while True:
            try:
                await self.poll(services(), agents)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("outbox delivery failed: %s", exc)
            await asyncio.sleep(every)
