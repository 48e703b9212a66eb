"""The `[live]` section (ARCHITECTURE §5): how live token streams and outbox wake-ups cross
processes. Unset, a PostgreSQL store uses LISTEN/NOTIFY on its own database and SQLite has no
bus (the outbox poll); `redis_url` puts both on Redis pub/sub instead, for either store."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from persyn.core.config_base import Section

__all__ = ["LiveConfig", "redis_url_problem", "shown_redis_url"]

_SCHEMES = ("redis", "rediss", "unix")
_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def redis_url_problem(url: str) -> str | None:
    """Why `url` is no Redis URL redis-py can connect to, or None. Checked here, without
    redis-py, so a typo is a configuration error at load, not a retry loop in the log."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in _SCHEMES:
        return f"the scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}"
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// URL names the socket's path (unix:///run/redis.sock)"
    if not parts.hostname:
        return "it names no host (redis://HOST:PORT/DB)"
    del port
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return f"the database {database!r} is not a number (redis://HOST:PORT/0)"
    return None


def shown_redis_url(url: str) -> str:
    """`url` with its password (and user) replaced by `***`: what logs and doctor print."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # not a URL at all: the configuration error shows it as written
    if parts.password is None and parts.username is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"***@{host}").geturl()


class LiveConfig(Section):
    """Live token streams and outbox wake-ups between processes (`persyn worker`, `persyn run
    --no-workers`, several hosts)."""

    redis_url: str | None = Field(
        default=None,
        description=(
            "Redis pub/sub for live tokens and outbox wake-ups between processes, replacing LISTEN/NOTIFY "
            "on PostgreSQL and giving several processes on one SQLite host the same; unset = PostgreSQL's "
            "own bus, or none on SQLite (replies then wait for the outbox poll). Best-effort: a Redis that "
            "is down loses live tokens, never a reply. Give each deployment a Redis user of its own: "
            "whoever can subscribe there reads the generated text as it streams."
        ),
        examples=["redis://127.0.0.1:6379/0"],
    )
    redis_namespace: str | None = Field(
        default=None,
        description=(
            "The prefix of this deployment's Redis channels (`persyn:NAMESPACE:live`); unset = a hash of "
            "the store's URL, so deployments sharing one Redis do not hear each other. Set it when "
            "hosts spell the store's URL differently (`persyn doctor` shows the one in use)."
        ),
        examples=["acme-prod"],
    )

    @field_validator("redis_url")
    @classmethod
    def _a_redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = redis_url_problem(value)
        if problem is not None:
            raise ValueError(f"{shown_redis_url(value)!r} is not a Redis URL: {problem}")
        return value

    @field_validator("redis_namespace")
    @classmethod
    def _a_namespace(cls, value: str | None) -> str | None:
        if value is not None and not _NAMESPACE.fullmatch(value):
            raise ValueError(f"{value!r}: 1 to 64 letters, digits, '_', '.' or '-'")
        return value
