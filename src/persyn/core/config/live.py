"""The `[live]` section (ARCHITECTURE §5): how live token streams and outbox wake-ups cross
processes. Unset, a PostgreSQL store uses LISTEN/NOTIFY on its own database and SQLite has no
bus (the outbox poll); `redis_url` puts both on Redis pub/sub instead, for either store."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

from pydantic import Field, field_validator

from persyn.core.section import Section
from persyn.core.urls import masked_url

__all__ = ["LiveConfig", "redis_url_problem"]

_SCHEMES = ("redis", "rediss", "unix")
_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def redis_url_problem(url: str) -> str | None:
    """Why `url` is no Redis URL redis-py can connect to, or None. Checked here, without
    redis-py, so a typo is a configuration error at load, not a retry loop in the log. The
    reason never quotes a part of the URL: a malformed one may split its password anywhere."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "its host is malformed (an unbalanced '[' or ']')"
    problem = _url_problem(parts)
    if problem is not None and "@" in url.partition("://")[2] and "@" not in parts.netloc:
        # The user info ends at the first '/', '?' or '#': what follows it went to the path.
        return "a '/', '?' or '#' in the user name or password must be percent-encoded (%2F, %3F, %23)"
    return problem


def _url_problem(parts: SplitResult) -> str | None:
    try:
        port = parts.port
    except ValueError:
        return "the port must be a number from 0 to 65535"
    del port
    if parts.scheme not in _SCHEMES:
        return f"the scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}"
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// URL names the socket's path (unix:///run/redis.sock)"
    if not parts.hostname:
        return "it names no host (redis://HOST:PORT/DB)"
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return "the path must be a database number (redis://HOST:PORT/0)"
    return None


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
            raise ValueError(f"{masked_url(value)!r} is not a Redis URL: {problem}")
        return value

    @field_validator("redis_namespace")
    @classmethod
    def _a_namespace(cls, value: str | None) -> str | None:
        if value is not None and not _NAMESPACE.fullmatch(value):
            raise ValueError(f"{value!r}: 1 to 64 letters, digits, '_', '.' or '-'")
        return value
