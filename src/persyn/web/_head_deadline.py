"""A deadline for a request's head: uvicorn's h11 protocol with one timer added.

uvicorn bounds only the idle time *between* requests (`timeout_keep_alive`, armed when a
response completes, cancelled by the first byte of the next request). A connection that
sends nothing, or trickles a request head and never ends it (slowloris), is held for ever:
each costs the daemon a socket and a file descriptor, and a few hundred of them leave it
unable to accept anyone (or to open its own database). Here every wait for a request head —
from the connection until its first request is parsed, and from the first byte of each
later one until it is parsed — is cut off after `seconds`.

Assumptions about `H11Protocol` (uvicorn 0.54), checked by
`tests/e2e/test_web_adversarial.py`: `cycle` is the current request's
`RequestResponseCycle` (None before the first request) and is replaced when a new request
head has been parsed, which happens inside `data_received` (or, for a pipelined request,
when the previous response completes); `transport` is the connection's transport, whose
protocol is replaced by uvicorn's WebSocket protocol when a request upgrades (then the timer is
disarmed: a WebSocket, such as a voice call's, lives longer than any request head).
The request *body* is bounded by the application (`WebContext.body`), where a stalled
client gets a 408 naming the setting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["with_head_deadline"]


def with_head_deadline(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol that closes a connection whose request head takes longer than
    `seconds` to arrive (pass it as `uvicorn.Config(http=...)`)."""

    class HeadDeadlineProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if (
                self.transport.get_protocol() is not self or self.cycle is not before
            ):  # upgraded to a WebSocket: no more heads
                self._disarm()
            elif self.cycle is None or self.cycle.response_complete:  # part of a head so far
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = asyncio.get_running_loop().call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeadDeadlineProtocol
