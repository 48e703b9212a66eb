"""The web channel adapter: an ordinary `Channel` whose surface is HTTP clients.

Everything the runtime hands a channel (token deltas, transmitted messages, notices, the end
of deferred deliberation) becomes a `LiveEvent` published to two kinds of listeners:

- the live streams of a conversation (`GET /v1/agents/{agent}/stream`: one key and one agent
  are one conversation, so the key's id is the channel name), and
- the waiter of one event (a chat completion streaming its own turn).

Publishing never waits: each listener has a bounded queue, and a listener that falls that
far behind is dropped (its stream ends with a `dropped` event), so a slow or vanished
browser never slows a turn (SPEC App. B rule 5).

Every listener belongs to the key whose request opened it. Revoking the key ends them
(`end_key`): whatever waited in their queues is discarded and an `ENDED` event is all their
readers get from then on (`web/context.py` notices a revocation made by another process).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from persyn.core.events import Event, Notice, Outbound
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.runtime.channel import Channel
from persyn.usage.records import UsageRecord

__all__ = ["ENDED", "OPERATOR_ONLY", "SERVICE", "Listener", "LiveEvent", "TurnUsage", "WebChannel"]

SERVICE = "web"
ENDED = "revoked"  # the type of a listener's last event once its key was revoked
_USAGE_KEPT = 4096  # turns whose usage is remembered until their completion is answered


# A live event's field only an operator's key is shown: a tool call's arguments can name what
# the agent does elsewhere (whom it writes to, what it looks up).
OPERATOR_ONLY = "arguments"


@dataclass(frozen=True)
class LiveEvent:
    """One thing to show live: `type` is token | withdraw | message | notice | deliberation_done,
    or `ENDED` (the listener's key was revoked: nothing follows)."""

    type: str
    event_id: str
    data: dict[str, Any] = field(default_factory=dict[str, Any])

    def payload(self, *, operator: bool = False) -> dict[str, Any]:
        """What a client is sent; `OPERATOR_ONLY` only to an operator's key."""
        data = self.data if operator else {k: v for k, v in self.data.items() if k != OPERATOR_ONLY}
        return {"type": self.type, "event_id": self.event_id, **data}


def _token(item: SinkEvent) -> dict[str, Any]:
    data: dict[str, Any] = {"phase": item.phase, "kind": item.kind, "text": item.text}
    if item.kind == "tool_start":
        data[OPERATOR_ONLY] = item.arguments  # dropped for any key but an operator's
    elif item.kind == "tool_end":
        data["status"] = item.status
    return data


class Listener:
    """A bounded queue of live events for a reader holding `key_id`'s request; `dropped` once
    it overflowed (its reader ends), `ended` once the key was revoked."""

    def __init__(self, size: int, key_id: str) -> None:
        self.queue: asyncio.Queue[LiveEvent] = asyncio.Queue(maxsize=size + 1)  # + the end
        self.size = size
        self.key_id = key_id
        self.dropped = False
        self.ended = False

    def offer(self, item: LiveEvent) -> bool:
        if self.dropped or self.ended:
            return False
        if self.queue.qsize() >= self.size:
            self.dropped = True
            return False
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped = True
            return False
        return True

    def end(self, reason: str) -> None:
        """The key was revoked: what waits is discarded, and the reader's next event is the
        last (`ENDED`), whatever the turn still publishes."""
        if self.ended:
            return
        self.ended = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(LiveEvent(ENDED, "", {"reason": reason}))

    def waiting(self, first: LiveEvent) -> list[LiveEvent]:
        """`first` and every event queued behind it."""
        batch = [first]
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())
        return batch


class TurnUsage:
    """A meter adapter (`usage.meter.MeterAdapter`) keeping the tokens of each turn's model
    calls by the turn's thread (the event id), for a chat completion's `usage` fields."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def handle(self, record: UsageRecord) -> None:
        if record.thread_id is None:
            return
        with self._lock:
            tokens_in, tokens_out = self._turns.pop(record.thread_id, (0, 0))
            self._turns[record.thread_id] = (
                tokens_in + record.input_tokens,  # cached prompt tokens are part of it already
                tokens_out + record.output_tokens,
            )
            while len(self._turns) > _USAGE_KEPT:
                self._turns.popitem(last=False)

    def take(self, event_id: str) -> tuple[int, int]:
        """(prompt tokens, completion tokens) of the turn answering `event_id`, forgotten here."""
        with self._lock:
            return self._turns.pop(event_id, (0, 0))

    def close(self) -> None:
        return None


class WebChannel(Channel):
    """The runtime side of the web surface. Interactive (a person waits, so deliberation
    defers) and streaming; it serves every agent (a client picks one per request)."""

    service = SERVICE
    interactive = True
    streams_tokens = True

    def __init__(self, buffer: int = 256) -> None:
        self.buffer = buffer
        self._streams: dict[tuple[str, str], set[Listener]] = {}  # (agent, channel) → live streams
        self._waiters: dict[str, Listener] = {}  # event id → one turn's waiter
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the HTTP server runs on: listeners' queues belong to it."""
        self._loop = loop
        self._thread = threading.get_ident()

    # listeners ---------------------------------------------------------------------------
    def listen(self, agent_id: str, channel: str) -> Listener:
        """A stream of the conversation of `channel` (a key's id) with `agent_id`."""
        listener = Listener(self.buffer, key_id=channel)
        self._streams.setdefault((agent_id, channel), set()).add(listener)
        return listener

    def unlisten(self, agent_id: str, channel: str, listener: Listener) -> None:
        listeners = self._streams.get((agent_id, channel))
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._streams[(agent_id, channel)]

    def wait_for(self, event_id: str, key_id: str) -> Listener:
        listener = Listener(max(self.buffer, 4096), key_id)
        self._waiters[event_id] = listener
        return listener

    def stop_waiting(self, event_id: str) -> None:
        self._waiters.pop(event_id, None)

    @property
    def stream_count(self) -> int:
        return sum(len(s) for s in self._streams.values())

    def open_keys(self) -> set[str]:
        """The keys with a live stream or a streamed turn open now."""
        return {channel for _, channel in self._streams} | {w.key_id for w in self._waiters.values()}

    def end_key(self, key_id: str, reason: str) -> int:
        """End every listener of `key_id` (revoked); how many were open."""
        ended = [w for w in self._waiters.values() if w.key_id == key_id]
        for (agent_id, channel), listeners in list(self._streams.items()):
            if channel == key_id:
                ended.extend(listeners)
                del self._streams[(agent_id, channel)]
        for listener in ended:
            listener.end(reason)
        return len(ended)

    def _publish(self, agent_id: str, channel: str, item: LiveEvent) -> None:
        if self._loop is not None and threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self._publish_here, agent_id, channel, item)
        else:
            self._publish_here(agent_id, channel, item)

    def _publish_here(self, agent_id: str, channel: str, item: LiveEvent) -> None:
        waiter = self._waiters.get(item.event_id)
        if waiter is not None:
            waiter.offer(item)
        listeners = self._streams.get((agent_id, channel))
        if not listeners:
            return
        for listener in list(listeners):
            if not listener.offer(item):  # too far behind: dropped, never waited for
                self.unlisten(agent_id, channel, listener)

    # the Channel port --------------------------------------------------------------------
    def sink_for(self, event: Event) -> SinkCallable | None:
        def sink(item: SinkEvent) -> None:
            self._publish(
                event.agent_id,
                event.channel,
                LiveEvent("token", event.id, _token(item)),
            )

        return sink

    async def deliver(self, outbound: Outbound) -> None:
        self._publish(
            outbound.agent_id,
            outbound.channel,
            LiveEvent(
                "message",
                outbound.event_id,
                {
                    "agent_id": outbound.agent_id,
                    "text": outbound.text,
                    "message_id": outbound.message_id,
                    "conversation_id": outbound.conversation_id,
                    "while_away": outbound.while_away,
                    "sent_at": outbound.sent_at.isoformat() if outbound.sent_at else None,
                },
            ),
        )

    async def notice(self, event: Event, notice: Notice) -> None:
        # A notice ends a turn that did not speak here: whatever draft streamed is withdrawn.
        self._publish(event.agent_id, event.channel, LiveEvent("withdraw", event.id, {}))
        self._publish(
            event.agent_id,
            event.channel,
            LiveEvent("notice", event.id, {"level": notice.level, "text": notice.text}),
        )

    def deliberation_done(self, event: Event, objections: int) -> None:
        self._publish(
            event.agent_id,
            event.channel,
            LiveEvent("deliberation_done", event.id, {"objections": objections}),
        )
