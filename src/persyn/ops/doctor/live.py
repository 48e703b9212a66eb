"""`persyn doctor` on the Redis live bus (ARCHITECTURE §5): reachable or not, at which URL
(never its password), under which channels, and what is lost while it is down."""

from __future__ import annotations

from persyn.core.config import Settings
from persyn.core.urls import masked_url
from persyn.ops.doctor.postgres import Check

__all__ = ["live_checks"]


async def live_checks(settings: Settings) -> list[Check]:
    """A row for the Redis bus where `[live] redis_url` is set; none otherwise (LISTEN/NOTIFY
    needs nothing beyond the PostgreSQL connection checked above)."""
    url = settings.live.redis_url
    if url is None:
        return []
    from persyn.runtime.delivery.bus import live_namespace
    from persyn.runtime.delivery.redis_bus import probe_redis, redis_channels  # redis-py only here

    shown = masked_url(url)
    channels = redis_channels(live_namespace(settings))
    found = await probe_redis(url)
    if found.error is not None:
        return [
            Check(
                "live bus (redis)",
                False,
                f"{shown}: unreachable ({found.error})",
                "start Redis, or correct [live] redis_url (check with `redis-cli -u URL ping`). Meanwhile "
                "nothing is lost but live tokens: a turn run by another process shows no tokens, and its "
                f"reply waits for the outbox poll (every {settings.dispatch.outbox_poll_seconds:g} s)",
            )
        ]
    return [
        Check(
            "live bus (redis)",
            True,
            f"{shown}: Redis {found.version}, channels {', '.join(sorted(channels.values()))}",
        )
    ]
