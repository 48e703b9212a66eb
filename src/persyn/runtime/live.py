"""Live streams and outbox wake-ups across processes (ARCHITECTURE §5): LISTEN/NOTIFY on
PostgreSQL; SQLite keeps its one-host mechanism (the outbox poll) and needs no bus.

Two things cross processes when a turn runs in one process and its channel is connected in
another (a `persyn worker` answering a web client held by `persyn run --no-workers`):

- **outbox wake-ups**: a process that wrote an outbox row for a channel not connected in it
  announces (service, agent) on `persyn_outbox`; every listening process flushes that
  agent's rows for that service if the channel is connected in it, at once, instead of at
  its next `[dispatch] outbox_poll_seconds` pass (which stays, for a missed notification);
- **token streams**: the turn's token sink, when the channel is not here, publishes the
  deltas on `persyn_live`; the process that took the event in (it knows the `Event`, so the
  channel's `sink_for` gets what it always gets) hands them to its channel's sink.

Best-effort, never blocking generation: publishing puts the item on a bounded queue and
returns; one task drains it, joining consecutive deltas of one stream into one NOTIFY (under
PostgreSQL's 8000-byte payload limit); a full queue drops, a failed NOTIFY is logged and the
connection remade. Order is kept: one publishing connection per process, one listening one,
and PostgreSQL delivers a session's notifications in commit order. A notification carries
only ids, a service name and the generated text; deployments sharing one database see each
other's ids, which name nothing they have.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.engine import make_url

from persyn.channels.base import Channel
from persyn.core.events import Event
from persyn.gateway.base import SinkCallable, SinkEvent

__all__ = ["LiveBus", "PostgresLiveBus", "live_bus"]

log = logging.getLogger(__name__)

OUTBOX_CHANNEL = "persyn_outbox"
LIVE_CHANNEL = "persyn_live"
_QUEUE = 2000  # items waiting to be published; beyond that, live tokens are dropped
_PAYLOAD = 7000  # bytes of text in one NOTIFY (PostgreSQL's payload limit is 8000)
_REMEMBERED = 1000  # events taken in here whose streams this process can show
# Set on an event taken in by a process whose channel streams tokens: only then does a
# worker elsewhere publish them (an event from `persyn send` or a chat network has no viewer).
LIVE_META = "persyn.live"

OnOutbox = Callable[[str, str], Awaitable[object]]


class LiveBus:
    """No bus: one process, or SQLite (whose deployments are one host, polled)."""

    async def start(self, on_outbox: OnOutbox, channel_sink: Callable[[Event], SinkCallable | None]) -> None:
        """Listen: `on_outbox(service, agent_id)` for an announced row; `channel_sink(event)`
        for the local channel's sink of an event taken in here."""

    def taken_in(self, event: Event, channel: Channel | None) -> Event:
        """`event` is being submitted in this process, where `channel` (its service's, if
        connected) may show its stream: the event to store, marked if it wants its tokens
        back from another process."""
        del channel
        return event

    def remote_sink(self, event: Event) -> SinkCallable | None:
        """A sink publishing `event`'s tokens for the process that took it in; None: none."""
        return None

    async def announce_outbox(self, service: str, agent_id: str) -> None:
        """A row for `service` was written and its channel is not connected here."""

    async def close(self) -> None:
        """Stop listening and publishing."""


def live_bus(url: str) -> LiveBus:
    """The bus for the store at `url`: LISTEN/NOTIFY on PostgreSQL, none otherwise."""
    return PostgresLiveBus(url) if make_url(url).get_backend_name() == "postgresql" else LiveBus()


class PostgresLiveBus(LiveBus):
    def __init__(self, url: str) -> None:
        # libpq takes the URL as SQLAlchemy spells it, without a driver name.
        self._conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(_QUEUE)
        self._events: OrderedDict[str, Event] = OrderedDict()
        self._tasks: list[asyncio.Task[None]] = []
        self._handing: set[asyncio.Future[object]] = set()  # deliveries under way
        self._dropped = 0

    async def start(self, on_outbox: OnOutbox, channel_sink: Callable[[Event], SinkCallable | None]) -> None:
        listening = asyncio.Event()
        self._tasks = [
            asyncio.ensure_future(self._listen(on_outbox, channel_sink, listening)),
            asyncio.ensure_future(self._publish()),
        ]
        # a notification sent after start returns is seen (bounded: a server that is away
        # leaves the bus retrying in the background and the poll delivering)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listening.wait(), 10)

    def taken_in(self, event: Event, channel: Channel | None) -> Event:
        if channel is None or not channel.streams_tokens:
            return event  # nobody here shows tokens: a worker elsewhere publishes none
        event = event.model_copy(update={"meta": {**event.meta, LIVE_META: "1"}})
        self._events[event.id] = event
        while len(self._events) > _REMEMBERED:
            self._events.popitem(last=False)
        return event

    def remote_sink(self, event: Event) -> SinkCallable | None:
        if event.meta.get(LIVE_META) != "1":
            return None  # taken in where no channel streams: publishing would be waste

        def sink(item: SinkEvent) -> None:
            self._put(LIVE_CHANNEL, {"e": event.id, "p": item.phase, "k": item.kind, "t": item.text})

        return sink

    async def announce_outbox(self, service: str, agent_id: str) -> None:
        self._put(OUTBOX_CHANNEL, {"s": service, "a": agent_id})

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    # publishing --------------------------------------------------------------------------
    def _put(self, channel: str, payload: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait((channel, payload))
        except asyncio.QueueFull:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                log.warning("live stream behind: %d notifications dropped", self._dropped)

    def _batch(self, first: tuple[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """`first` and whatever waits behind it, consecutive deltas of one stream joined."""
        batch = [first]
        while not self._queue.empty():
            channel, payload = self._queue.get_nowait()
            last_channel, last = batch[-1]
            if (
                channel == last_channel == LIVE_CHANNEL
                and payload["k"] == last["k"] == "delta"
                and (payload["e"], payload["p"]) == (last["e"], last["p"])
                and len((last["t"] + payload["t"]).encode()) <= _PAYLOAD
            ):
                batch[-1] = (channel, {**last, "t": last["t"] + payload["t"]})
            else:
                batch.append((channel, payload))
        return batch

    async def _publish(self) -> None:
        import psycopg

        connection: psycopg.AsyncConnection[Any] | None = None
        while True:
            batch = self._batch(await self._queue.get())
            try:
                if connection is None or connection.closed:
                    connection = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                for channel, payload in batch:
                    for part in _split(payload):
                        await connection.execute("SELECT pg_notify(%s, %s)", (channel, json.dumps(part)))
            except asyncio.CancelledError:
                if connection is not None:
                    await connection.close()
                raise
            except Exception as exc:  # best-effort: these are lost; the outbox poll remains
                log.warning("live notifications not sent: %s", exc)
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.close()
                connection = None

    # listening ---------------------------------------------------------------------------
    async def _listen(
        self,
        on_outbox: OnOutbox,
        channel_sink: Callable[[Event], SinkCallable | None],
        listening: asyncio.Event,
    ) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {OUTBOX_CHANNEL}")
                    await connection.execute(f"LISTEN {LIVE_CHANNEL}")
                    listening.set()
                    async for note in connection.notifies():
                        self._received(note.channel, note.payload, on_outbox, channel_sink)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server went away: listen again shortly
                log.warning("live notifications: listening failed, retrying: %s", exc)
                await asyncio.sleep(1.0)

    def _received(
        self,
        channel: str,
        raw: str,
        on_outbox: OnOutbox,
        channel_sink: Callable[[Event], SinkCallable | None],
    ) -> None:
        try:
            payload = json.loads(raw)
            if channel == OUTBOX_CHANNEL:
                self._hand(on_outbox(str(payload["s"]), str(payload["a"])))
                return
            event = self._events.get(str(payload["e"]))
            sink = channel_sink(event) if event is not None else None
            if sink is None:
                return  # not taken in here, or its channel is not connected here
            result = sink(SinkEvent(phase=str(payload["p"]), kind=payload["k"], text=str(payload["t"])))
            if result is not None:
                self._hand(result)
        except Exception as exc:  # a malformed or unknown notification changes nothing
            log.debug("live notification on %s ignored: %s", channel, exc)

    def _hand(self, work: Awaitable[object]) -> None:
        task: asyncio.Future[object] = asyncio.ensure_future(work)
        self._handing.add(task)
        task.add_done_callback(self._handed)

    def _handed(self, task: asyncio.Future[object]) -> None:
        self._handing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("live notification not handed over: %s", task.exception())


def _split(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """`payload` in parts whose text fits one NOTIFY."""
    text = str(payload.get("t", ""))
    if len(text.encode()) <= _PAYLOAD:
        return [payload]
    parts: list[dict[str, Any]] = []
    chunk = ""
    for char in text:
        if len((chunk + char).encode()) > _PAYLOAD:
            parts.append({**payload, "t": chunk})
            chunk = ""
        chunk += char
    parts.append({**payload, "t": chunk})
    return parts
