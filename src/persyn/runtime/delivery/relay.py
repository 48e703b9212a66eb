"""The live bus's port and what the adapters relaying through a server share (ARCHITECTURE
§5; the adapters: `bus.py` for PostgreSQL, `redis_bus.py` for Redis).

Best-effort, never blocking generation: publishing puts the item on a bounded queue and
returns; one task drains it, joining consecutive deltas of one stream into one message
(under the server's payload limit); a full queue drops, and so does a server that is away
(both counted in `dropped`); a failed send is logged and the connection remade after a
backoff. Order is kept: one publishing connection per process, one listening one, and both
servers deliver one connection's messages in the order sent. A message carries only ids, a
phase, the generated text and a seal.

A token message is sealed (HMAC-SHA256) with a key the process that took the event in put in
the event's meta (`LIVE_META`): the key travels through the store, never on the bus, so
whoever can publish on the server but not read the store cannot put words in a live view,
and a sequence number per sender refuses a replayed message. Outbox wake-ups carry no
secret (a forged one costs one flush of stored rows) and are coalesced per (service, agent).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from persyn.core.events import Event
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.runtime.channel import Channel

__all__ = ["LIVE_CHANNEL", "LIVE_META", "OUTBOX_CHANNEL", "ChannelSink", "LiveBus", "OnOutbox", "RelayBus"]

log = logging.getLogger(__name__)

OUTBOX_CHANNEL = "persyn_outbox"
LIVE_CHANNEL = "persyn_live"
_QUEUE = 2000  # items waiting to be published; beyond that, live tokens are dropped
_REMEMBERED = 1000  # events taken in here whose streams this process can show
_LARGEST = 256_000  # bytes: a message larger than any a bus sends is not parsed
_FIRST_RETRY, _LAST_RETRY = 0.5, 30.0  # seconds between reconnection attempts (doubling)
# Set on an event taken in by a process whose channel streams tokens: only then does a
# worker elsewhere publish them (an event from `persyn send` or a chat network has no
# viewer). Its value is the key that seals the event's token messages.
LIVE_META = "persyn.live"

OnOutbox = Callable[[str, str], Awaitable[object]]
ChannelSink = Callable[[Event], SinkCallable | None]
Item = tuple[str, dict[str, Any]]


class LiveBus:
    """The port, and no bus: one process, or SQLite without Redis (one host, polled)."""

    async def start(self, on_outbox: OnOutbox, channel_sink: ChannelSink) -> None:
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


class RelayBus(LiveBus, ABC):
    """A bus relayed through a server: what the PostgreSQL and Redis adapters share. An
    adapter supplies `_send`, `_close_publisher` and `_subscribe`; messages here are named by
    the logical channels `OUTBOX_CHANNEL` and `LIVE_CHANNEL`."""

    payload_bytes = 7000  # JSON-encoded text in one message

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Item] = asyncio.Queue(_QUEUE)
        self._events: OrderedDict[str, Event] = OrderedDict()
        self._tasks: list[asyncio.Task[None]] = []
        self._handing: set[asyncio.Future[object]] = set()  # deliveries under way
        self._flushing: dict[tuple[str, str], bool] = {}  # flush under way → woken again meanwhile
        self._sender = secrets.token_hex(8)  # this process's name in sealed messages
        self._sent: OrderedDict[str, int] = OrderedDict()  # event id → last sequence number sent
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()  # (event, sender) → last taken
        self._on_outbox: OnOutbox | None = None
        self._channel_sink: ChannelSink | None = None
        self.dropped = 0  # messages lost to a full queue or a server that was away
        self.subscribed = asyncio.Event()  # set while listening
        self._attempted = asyncio.Event()  # the first subscription succeeded or failed

    # the adapter's part ------------------------------------------------------------------
    @abstractmethod
    async def _send(self, channel: str, message: str) -> None:
        """Publish `message` on `channel`, connecting first if need be; raise if it failed."""

    @abstractmethod
    async def _close_publisher(self) -> None:
        """Drop the publishing connection (the next `_send` makes a new one)."""

    @abstractmethod
    async def _subscribe(self, received: Callable[[str, str], None], subscribed: Callable[[], None]) -> None:
        """Listen on both channels, call `subscribed()` once a message sent from now on is
        sure to arrive, then `received(channel, message)` for each; raise when the
        connection is lost."""

    # LiveBus -----------------------------------------------------------------------------
    async def start(self, on_outbox: OnOutbox, channel_sink: ChannelSink) -> None:
        self._on_outbox, self._channel_sink = on_outbox, channel_sink
        self._tasks = [asyncio.ensure_future(self._listen()), asyncio.ensure_future(self._publish())]
        # a message sent after start returns is seen, once the first attempt subscribed; a
        # server that refuses or does not answer within 10 s leaves the bus retrying in the
        # background and the poll delivering
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), 10)

    def taken_in(self, event: Event, channel: Channel | None) -> Event:
        if channel is None or not channel.streams_tokens:
            return event  # nobody here shows tokens: a worker elsewhere publishes none
        key = secrets.token_urlsafe(16)
        event = event.model_copy(update={"meta": {**event.meta, LIVE_META: key}})
        _remember(self._events, event.id, event)
        return event

    def remote_sink(self, event: Event) -> SinkCallable | None:
        key = event.meta.get(LIVE_META)
        if not key:
            return None  # taken in where no channel streams: publishing would be waste

        def sink(item: SinkEvent) -> None:
            self._put(
                LIVE_CHANNEL, {"e": event.id, "p": item.phase, "k": item.kind, "t": item.text, "key": key}
            )

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
        self.subscribed.clear()

    # publishing --------------------------------------------------------------------------
    def _put(self, channel: str, payload: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait((channel, payload))
        except asyncio.QueueFull:
            if channel == OUTBOX_CHANNEL and self._make_room():
                self._queue.put_nowait((channel, payload))
            else:
                self._drop(1, "the live stream is behind")

    def _make_room(self) -> bool:
        """Drop the oldest waiting token message for a wake-up (a reply would otherwise wait
        for the poll behind tokens a burst is losing anyway). Wake-ups ahead of it move behind
        the tokens still waiting, which only delays them; False if only wake-ups wait."""
        kept: list[Item] = []
        freed = False
        while not self._queue.empty() and not freed:
            item = self._queue.get_nowait()
            if item[0] == LIVE_CHANNEL:
                self._drop(1, "the live stream is behind")
                freed = True
            else:
                kept.append(item)
        for item in kept:
            self._queue.put_nowait(item)
        return freed

    def _drop(self, count: int, why: str) -> None:
        before, self.dropped = self.dropped, self.dropped + count
        if before == 0 or before // 1000 != self.dropped // 1000:
            log.warning("live notifications dropped (%s): %d so far", why, self.dropped)

    def _batch(self, first: Item) -> list[Item]:
        """`first` and whatever waits behind it, consecutive deltas of one stream joined."""
        batch = [first]
        while not self._queue.empty():
            channel, payload = self._queue.get_nowait()
            last_channel, last = batch[-1]
            if (
                channel == last_channel == LIVE_CHANNEL
                and payload["k"] == last["k"] == "delta"
                and (payload["e"], payload["p"]) == (last["e"], last["p"])
                and _encoded_size(last["t"] + payload["t"]) <= self.payload_bytes
            ):
                batch[-1] = (channel, {**last, "t": last["t"] + payload["t"]})
            else:
                batch.append((channel, payload))
        return batch

    async def _publish(self) -> None:
        try:
            await self._publish_until_cancelled()
        finally:
            with contextlib.suppress(Exception):
                await self._close_publisher()

    async def _publish_until_cancelled(self) -> None:
        loop = asyncio.get_running_loop()
        retry_at, delay = 0.0, _FIRST_RETRY
        while True:
            batch = self._batch(await self._queue.get())
            if loop.time() < retry_at:
                self._drop(len(batch), "the server is away")
                continue
            try:
                for channel, payload in batch:
                    for part in _split(payload, self.payload_bytes):
                        await self._send(channel, json.dumps(self._sealed(channel, part), ensure_ascii=False))
                delay = _FIRST_RETRY
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # best-effort: these are lost; the outbox poll remains
                self._drop(len(batch), "not sent")
                log.warning("live notifications not sent: %s (retrying in %.1f s)", exc, delay)
                with contextlib.suppress(Exception):
                    await self._close_publisher()
                retry_at, delay = loop.time() + delay, min(delay * 2, _LAST_RETRY)

    def _sealed(self, channel: str, payload: dict[str, Any]) -> dict[str, Any]:
        if channel != LIVE_CHANNEL:
            return payload
        fields = {name: value for name, value in payload.items() if name != "key"}
        sequence = self._sent.get(fields["e"], 0) + 1
        _remember(self._sent, fields["e"], sequence)
        fields.update(n=self._sender, q=sequence)
        return {**fields, "m": _seal(str(payload["key"]), fields)}

    # listening ---------------------------------------------------------------------------
    async def _listen(self) -> None:
        delay = _FIRST_RETRY

        def subscribed() -> None:
            nonlocal delay
            delay = _FIRST_RETRY
            self.subscribed.set()
            self._attempted.set()

        while True:
            try:
                await self._subscribe(self._received, subscribed)
                raise ConnectionError("the subscription ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server went away: listen again after a while
                self.subscribed.clear()
                self._attempted.set()
                log.warning("live notifications: listening failed, retrying in %.1f s: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _LAST_RETRY)

    def _received(self, channel: str, raw: str) -> None:
        try:
            if len(raw) > _LARGEST:
                return
            payload = json.loads(raw)
            if channel == OUTBOX_CHANNEL:
                self._woken((str(payload["s"]), str(payload["a"])))
                return
            event = self._events.get(str(payload["e"]))
            if event is None:
                return  # not taken in here
            fields = {name: value for name, value in payload.items() if name != "m"}
            if not hmac.compare_digest(str(payload["m"]), _seal(event.meta[LIVE_META], fields)):
                log.debug("live message for %s refused: its seal does not match", event.id)
                return
            stream = (event.id, str(payload["n"]))
            if int(payload["q"]) <= self._seen.get(stream, 0):
                return  # a replay, or older than what was shown
            _remember(self._seen, stream, int(payload["q"]))
            sink = self._channel_sink(event) if self._channel_sink is not None else None
            if sink is None:
                return  # its channel is not connected here
            result = sink(SinkEvent(phase=str(payload["p"]), kind=payload["k"], text=str(payload["t"])))
            if result is not None:
                self._hand(result)
        except Exception as exc:  # a malformed or unknown message changes nothing
            log.debug("live message on %s ignored: %s", channel, exc)

    def _woken(self, key: tuple[str, str]) -> None:
        """Flush `key`'s rows; a wake-up during a flush runs one more after it (that flush
        may have read before the new row was written), and a burst of them no more."""
        if key in self._flushing:
            self._flushing[key] = True
            return
        self._flushing[key] = False
        self._hand(self._flush(key))

    async def _flush(self, key: tuple[str, str]) -> None:
        try:
            while self._on_outbox is not None:
                await self._on_outbox(*key)
                if not self._flushing.get(key):
                    return
                self._flushing[key] = False
        finally:
            self._flushing.pop(key, None)

    def _hand(self, work: Awaitable[object]) -> None:
        task: asyncio.Future[object] = asyncio.ensure_future(work)
        self._handing.add(task)
        task.add_done_callback(self._handed)

    def _handed(self, task: asyncio.Future[object]) -> None:
        self._handing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("live notification not handed over: %s", task.exception())


_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(memory: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Set `key` in a memory of the last `_REMEMBERED` keys set."""
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > _REMEMBERED:
        memory.popitem(last=False)


def _seal(key: str, fields: dict[str, Any]) -> str:
    signed = json.dumps(
        [fields["e"], fields["p"], fields["k"], fields["t"], fields["n"], fields["q"]], ensure_ascii=False
    )
    return hmac.new(key.encode(), signed.encode(), hashlib.sha256).hexdigest()[:32]


def _encoded_size(text: str) -> int:
    """Bytes `text` takes inside a JSON message (escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def _split(payload: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """`payload` in parts whose text fits one message."""
    text = str(payload.get("t", ""))
    if _encoded_size(text) <= limit:
        return [payload]
    parts: list[dict[str, Any]] = []
    chunk: list[str] = []
    size = 0
    for char in text:
        cost = _encoded_size(char)
        if size + cost > limit:
            parts.append({**payload, "t": "".join(chunk)})
            chunk, size = [], 0
        chunk.append(char)
        size += cost
    parts.append({**payload, "t": "".join(chunk)})
    return parts
