"""The channel port: how the runtime hands speech, notices and live tokens to a surface, and
how it connects a chat network it holds the lease of (`NetworkChannel`, `LeasedChannel`). The
adapters (`channels/`) implement it; the runtime never imports them.

A `Channel` declares what it can do by overriding defaults, never by the runtime probing
for attributes: `interactive` (a person waits for the reply: deliberation defers there),
`streams_tokens` with `sink_for`, `shows_images`, `deliberation_done`, `serves` (which agents' messages it
shows). Everything the agent says reaches a channel through the outbox (`runtime/delivery/outbox.py`)
and `deliver_outbound`, at least once: the base class drops a message whose outbox id it
has already shown, so a redelivery after a crash or a racing deliverer is shown once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from starlette.requests import Request

from persyn.core.errors import ChannelError
from persyn.core.events import Event, Notice, Outbound
from persyn.gateway.base import SinkCallable

__all__ = [
    "Backoff",
    "BodyRefused",
    "Channel",
    "ConnectionState",
    "LeasedChannel",
    "Link",
    "LinkTracker",
    "NetworkChannel",
    "capped_body",
    "describe_states",
    "end_task",
    "images_as_text",
    "safe_sink",
]

_REMEMBERED = 4096  # outbox ids remembered per channel for deduplication
_FAILING_AFTER = 3  # attempts in a row that failed before a reconnecting link counts as failing


class Link(StrEnum):
    """A channel connection's state, as the operator's console shows it."""

    CONNECTING = "connecting"  # first attempt under way
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"  # lost, trying again
    FAILING = "failing"  # `_FAILING_AFTER` attempts in a row failed


@dataclass(frozen=True)
class ConnectionState:
    service: str
    name: str  # which of the service's connections (an agent's nick, the bot account); "" if one
    link: Link
    since: datetime | None  # when it entered this state (None: as long as the channel is attached)
    failures: int = 0  # attempts in a row that failed
    detail: str = ""  # the last failure


async def end_task(task: asyncio.Task[None] | None) -> None:
    """Cancel a network channel's connect loop and wait for it to end (its own failure or the
    cancellation swallowed: `stop` goes on to close the rest)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


class BodyRefused(Exception):
    """A request body that was not read: `status` is the HTTP answer (400, 408, 413), `reason`
    names what was wrong and the setting that limits it, `header` the header at fault if any."""

    def __init__(self, status: int, reason: str, *, header: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.header = header


async def capped_body(request: Request, limit: int, *, seconds: float, setting: str) -> bytes:
    """A request's body, read only as far as `limit` bytes: a declared Content-Length over it is
    refused before one byte is read, and a body that goes on past it (a missing or lying length)
    is cut at the limit. A body still arriving after `seconds` is refused too (408), so a client
    trickling bytes does not hold a connection. Every route a stranger on the network can reach
    reads its body this way — the web API's and the networks' webhooks (Slack's Events API,
    Twilio's call webhook) — never with `request.body()` or `request.form()`, which read all of
    it. `setting` names the limit in the refusal."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BodyRefused(400, f"invalid Content-Length {declared!r}", header="Content-Length")
        if int(declared) > limit:
            raise BodyRefused(
                413, f"request body of {int(declared)} bytes is over the limit of {limit} ({setting})"
            )
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyRefused(413, f"request body is over the limit of {limit} bytes ({setting})")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyRefused(
            408, f"the request body did not arrive within {seconds:g}s ([web] request_timeout_seconds)"
        ) from exc
    return b"".join(chunks)


def describe_states(states: Sequence[ConnectionState]) -> str:
    """`states` as one line for an operator in another process (a lease's `state`, read by
    `persyn doctor` and `persyn channels show`): "Ada: connected since 17:40:02 UTC; Bo:
    reconnecting since 17:41:10 UTC (2 failed: refused)"."""
    parts: list[str] = []
    for state in states:
        line = f"{state.name}: {state.link.value}" if state.name else state.link.value
        if state.since is not None:
            line += f" since {state.since:%Y-%m-%d %H:%M:%S} UTC"
        if state.failures:
            line += (
                f" ({state.failures} failed: {state.detail[:200]})"
                if state.detail
                else f" ({state.failures} failed)"
            )
        parts.append(line)
    return "; ".join(parts)


class LinkTracker:
    """One connection's state, told by the adapter's connect loop as it goes (`attempt`,
    `up`, `lost`); read at any time (`state`). Not thread-safe: one event loop's."""

    def __init__(self, service: str, name: str, now: Callable[[], datetime]) -> None:
        self._service, self._name, self._now = service, name, now
        self._link, self._since = Link.CONNECTING, now()
        self._failures, self._detail = 0, ""

    def _enter(self, link: Link) -> None:
        if link is not self._link:
            self._link, self._since = link, self._now()

    def up(self) -> None:
        self._failures, self._detail = 0, ""
        self._enter(Link.CONNECTED)

    def lost(self, error: BaseException | str) -> None:
        """The connection dropped, or an attempt failed: reconnecting, failing once
        `_FAILING_AFTER` attempts in a row have."""
        self._failures += 1
        self._detail = str(error) or type(error).__name__
        self._enter(Link.FAILING if self._failures >= _FAILING_AFTER else Link.RECONNECTING)

    def state(self) -> ConnectionState:
        return ConnectionState(
            self._service, self._name, self._link, self._since, self._failures, self._detail
        )


class Backoff:
    """The waits of a connect loop between attempts: doubling from `first` up to `cap`, each
    drawn at random from its upper half ("equal jitter"), so the agents of a deployment that
    lost one server do not all reconnect in the same instant, and none waits less than half
    the doubled step. `reset` when a connection came up; `next` before each wait."""

    def __init__(
        self, first: float, cap: float, *, uniform: Callable[[float, float], float] = random.uniform
    ) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"backoff needs 0 < first <= cap, got {first!r} and {cap!r}")
        self._first, self._cap, self._uniform = first, cap, uniform
        self._step = first

    def reset(self) -> None:
        self._step = self._first

    def next(self) -> float:
        step = self._step
        self._step = min(step * 2, self._cap)
        return self._uniform(step / 2, step)


class Channel(ABC):
    """A surface (terminal, web, chat service). Entry points must return quickly: a slow
    or broken adapter never blocks the pipeline (SPEC App. B rule 5)."""

    service: str
    interactive: bool = False
    streams_tokens: bool = False
    # Shows `Outbound.images` itself; otherwise `deliver_outbound` adds a text line per image
    # (its reference), so no surface loses an image it cannot display.
    shows_images: bool = False
    # Whether that line may name the image's file on this host: only on the operator's own
    # surfaces (the terminal); a chat room or a web client is never told the host's paths.
    shows_host_paths: bool = False

    @abstractmethod
    async def deliver(self, outbound: Outbound) -> None:
        """The agent's transmitted speech (`outbound.while_away`: it waited for this
        channel to connect)."""

    async def notice(self, event: Event, notice: Notice) -> None:
        """Something to show that is not the agent speaking (silence, errors)."""
        return None

    def sink_for(self, event: Event) -> SinkCallable | None:
        """A token sink for live presentation of this event's generation (`streams_tokens`)."""
        return None

    def deliberation_done(self, event: Event, objections: int) -> None:
        """Deferred deliberation of a reply already delivered has ended."""
        return None

    def serves(self, agent_id: str) -> bool:
        """Whether this channel shows `agent_id`'s messages (a terminal shows one agent's)."""
        return True

    async def direct_channel(self, agent_id: str, speaker_id: str) -> str:
        """The channel a message to one person goes to, given their identity's speaker id on
        this network (outreach to a contact never met here, `core.records.DIRECT_PREFIX`): a DM opened, or
        the address itself. A network where that cannot be done raises, naming why."""
        raise ChannelError(f"{self.service} cannot write to one person directly; set their preferred channel")

    def track(self, name: str, now: Callable[[], datetime]) -> LinkTracker:
        """A tracker of one of its connections (`name`: whose), which its connect loop tells
        and `connection_states` reports."""
        tracker = LinkTracker(self.service, name, now)
        links: dict[str, LinkTracker] = vars(self).setdefault("_links", {})
        links[name] = tracker
        return tracker

    def connection_states(self) -> list[ConnectionState]:
        """Each tracked connection's state; a surface with no connection of its own (the
        terminal, the web) is connected while attached."""
        links: dict[str, LinkTracker] = vars(self).get("_links", {})
        if not links:
            return [ConnectionState(self.service, "", Link.CONNECTED, None)]
        return [link.state() for link in links.values()]

    async def deliver_outbound(self, outbound: Outbound) -> bool:
        """`deliver`, once per outbox id: False (nothing shown) for one already delivered
        here. A failure raises, and the id is not remembered (the outbox retries it)."""
        seen: OrderedDict[str, None] = vars(self).setdefault("_outbox_seen", OrderedDict())
        key = outbound.outbox_id
        if key is not None and key in seen:
            return False
        await self.deliver(
            outbound if self.shows_images else images_as_text(outbound, with_paths=self.shows_host_paths)
        )
        if key is not None:
            seen[key] = None
            if len(seen) > _REMEMBERED:
                seen.popitem(last=False)
        return True


def images_as_text(outbound: Outbound, *, with_paths: bool = False) -> Outbound:
    """`outbound` for a surface that shows no images: one line per image in its text, with
    the image's file on this host only `with_paths` (the operator's own surfaces)."""
    if not outbound.images:
        return outbound
    lines = [
        f"[image {image.reference}: {image.path}]" if with_paths else f"[image {image.reference}]"
        for image in outbound.images
    ]
    return outbound.model_copy(update={"text": "\n".join((outbound.text, *lines)), "images": ()})


def safe_sink(channel: Channel | None, event: Event) -> SinkCallable | None:
    """`channel`'s token sink for `event`, or None: a channel that fails to give one is shown
    no live tokens, and generation goes on (SPEC App. B rule 5)."""
    if channel is None:
        return None
    try:
        return channel.sink_for(event)
    except Exception:
        return None


class NetworkChannel(Protocol):
    """A channel with a lifespan of its own (connections, polling)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def connection_states(self) -> list[ConnectionState]: ...


@dataclass(frozen=True)
class LeasedChannel:
    """A network `service` and how to build its channel: built afresh each time a process
    takes its lease (`runtime/delivery/channel_leases.py`), since a stopped channel is not started again."""

    service: str
    build: Callable[[], NetworkChannel]
