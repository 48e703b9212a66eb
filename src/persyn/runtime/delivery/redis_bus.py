"""The live bus on Redis pub/sub (ARCHITECTURE §5), where `[live] redis_url` is set: the same
two duties as LISTEN/NOTIFY (`bus.py`), for a PostgreSQL store or for several processes of
one SQLite host. Imported only where configured, so redis-py is loaded only there.

The channels are `persyn:NAMESPACE:outbox` and `persyn:NAMESPACE:live` (`live_namespace`):
deployments sharing one Redis neither hear nor disturb each other. Pub/sub keeps nothing, so a
message sent while a listener is reconnecting is lost: tokens are gone, replies wait for the
outbox poll. redis-py's own retries are off (`Retry(NoBackoff(), 0)`): the bus reconnects
with its own backoff in the background, and a send never waits behind a reconnection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from persyn.core.urls import masked_url
from persyn.runtime.delivery.relay import LIVE_CHANNEL, OUTBOX_CHANNEL, RelayBus

__all__ = ["RedisLiveBus", "RedisProbe", "probe_redis", "redis_channels"]

_CONNECT_SECONDS = 5.0  # a Redis host that does not answer is away (retried later)
_SEND_SECONDS = 5.0  # a publish that takes longer has lost its server
_IDLE_SECONDS = 30  # a quiet subscription is pinged this often, so a lost server is noticed


def redis_channels(namespace: str) -> dict[str, str]:
    """The Redis channel of each logical channel, for the deployment `namespace`."""
    return {OUTBOX_CHANNEL: f"persyn:{namespace}:outbox", LIVE_CHANNEL: f"persyn:{namespace}:live"}


def _client(url: str, *, listening: bool) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=_CONNECT_SECONDS,
        socket_timeout=None if listening else _SEND_SECONDS,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=_IDLE_SECONDS if listening else 0,
        client_name="persyn-live",
    )


class RedisLiveBus(RelayBus):
    """Redis pub/sub: one publishing and one subscribed connection per process."""

    payload_bytes = 16_000  # Redis takes far more; a bigger message only delays the first token

    def __init__(self, url: str, namespace: str) -> None:
        super().__init__()
        self.url = url
        self.channels = redis_channels(namespace)
        self._logical = {name.encode(): logical for logical, name in self.channels.items()}
        self._publisher: aioredis.Redis | None = None

    async def _send(self, channel: str, message: str) -> None:
        if self._publisher is None:
            self._publisher = _client(self.url, listening=False)
        await self._publisher.publish(self.channels[channel], message)

    async def _close_publisher(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            await publisher.aclose()

    async def _subscribe(self, received: Callable[[str, str], None], subscribed: Callable[[], None]) -> None:
        client = _client(self.url, listening=True)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe(*self.channels.values())
            confirmed = 0
            while confirmed < len(self.channels):  # the server has them: later messages arrive
                reply = await pubsub.get_message(timeout=_CONNECT_SECONDS)
                if reply is None:
                    raise ConnectionError(f"{masked_url(self.url)} did not confirm the subscription")
                confirmed += reply["type"] == "subscribe"
            subscribed()
            while True:
                message = await pubsub.get_message(timeout=_IDLE_SECONDS)
                if message is None or message["type"] != "message":
                    continue  # idle (the health check pings), or a pong
                logical = self._logical.get(message["channel"])
                data = message["data"]
                if logical is not None and isinstance(data, bytes):
                    received(logical, data.decode("utf-8", "replace"))
        finally:
            await pubsub.aclose()
            await client.aclose()


@dataclass(frozen=True)
class RedisProbe:
    """What `persyn doctor` found at a Redis URL: its version, or why it did not answer."""

    version: str | None
    error: str | None


async def probe_redis(url: str) -> RedisProbe:
    """Connect, PING and read the server's version, within a few seconds."""
    client = _client(url, listening=False)
    try:
        async with asyncio.timeout(_CONNECT_SECONDS + _SEND_SECONDS):
            await client.ping()
            info = await client.info("server")
        return RedisProbe(str(info.get("redis_version", "?")), None)
    except Exception as exc:  # doctor reports whatever went wrong
        return RedisProbe(None, str(exc) or type(exc).__name__)
    finally:
        await client.aclose()
