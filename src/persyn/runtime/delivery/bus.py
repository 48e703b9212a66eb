"""Live streams and outbox wake-ups across processes (ARCHITECTURE §5): which bus a deployment
uses, and the LISTEN/NOTIFY one. Redis pub/sub where `[live] redis_url` is set
(`redis_bus.py`, for either store); otherwise PostgreSQL's own LISTEN/NOTIFY, and on SQLite
no bus (its one-host mechanism is the outbox poll). The port and what the relaying buses share
(bounded queue, joined deltas, sealed token messages, backoff) are in `relay.py`.

Two things cross processes when a turn runs in one process and its channel is connected in
another (a `persyn worker` answering a web client held by `persyn run --no-workers`):

- **outbox wake-ups**: a process that wrote an outbox row for a channel not connected in it
  announces (service, agent) on the outbox channel; every listening process flushes that
  agent's rows for that service if the channel is connected in it, at once, instead of at
  its next `[dispatch] outbox_poll_seconds` pass (which stays, for a missed notification);
- **token streams**: the turn's token sink, when the channel is not here, publishes the
  deltas on the live channel; the process that took the event in (it knows the `Event`, so
  the channel's `sink_for` gets what it always gets) hands them to its channel's sink.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import make_url

from persyn.core.config import Settings
from persyn.runtime.delivery.relay import LIVE_CHANNEL, LIVE_META, OUTBOX_CHANNEL, LiveBus, RelayBus

__all__ = ["LIVE_META", "LiveBus", "PostgresLiveBus", "RelayBus", "live_bus", "live_namespace"]


def live_bus(settings: Settings) -> LiveBus:
    """The bus `settings` choose: Redis where `[live] redis_url` is set, LISTEN/NOTIFY on a
    PostgreSQL store, none otherwise."""
    if settings.live.redis_url is not None:
        from persyn.runtime.delivery.redis_bus import RedisLiveBus  # redis-py only where configured

        return RedisLiveBus(settings.live.redis_url, live_namespace(settings))
    if make_url(settings.database_url).get_backend_name() == "postgresql":
        return PostgresLiveBus(settings.database_url)
    return LiveBus()


def live_namespace(settings: Settings) -> str:
    """What keeps this deployment's channels apart from another's on a shared server:
    `[live] redis_namespace`, or a hash of the store's URL without its password (every
    process of a deployment names the same store; the hash tells a stranger nothing of it)."""
    if settings.live.redis_namespace is not None:
        return settings.live.redis_namespace
    store = make_url(settings.database_url).render_as_string(hide_password=True)
    return hashlib.sha256(store.encode()).hexdigest()[:16]


class PostgresLiveBus(RelayBus):
    """LISTEN/NOTIFY on the store's own database."""

    payload_bytes = 7000  # PostgreSQL's NOTIFY payload limit is 8000 bytes, with the envelope

    def __init__(self, url: str) -> None:
        super().__init__()
        # libpq takes the URL as SQLAlchemy spells it, without a driver name.
        self._conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._publisher: Any = None

    async def _send(self, channel: str, message: str) -> None:
        import psycopg

        if self._publisher is None or self._publisher.closed:
            self._publisher = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        await self._publisher.execute("SELECT pg_notify(%s, %s)", (channel, message))

    async def _close_publisher(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            await publisher.close()

    async def _subscribe(self, received: Callable[[str, str], None], subscribed: Callable[[], None]) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as connection:
            await connection.execute(f"LISTEN {OUTBOX_CHANNEL}")
            await connection.execute(f"LISTEN {LIVE_CHANNEL}")
            subscribed()
            async for note in connection.notifies():
                received(note.channel, note.payload)
