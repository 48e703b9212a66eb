"""One error tree for Persyn. Each class says who is at fault; messages name the
offending value with !r so the user can find it.

`is_storage_full` recognises the one failure of the machine every layer meets the same way:
the disk (or the database server's disk) is full."""

from __future__ import annotations

import errno

__all__ = [
    "STORAGE_UNAVAILABLE",
    "ChannelError",
    "ConfigError",
    "EmbedderUnavailable",
    "InputError",
    "ModelError",
    "ModelUnavailableError",
    "PersynError",
    "StoreError",
    "ToolError",
    "is_storage_full",
]

STORAGE_UNAVAILABLE = "the agent's storage is unavailable; try again later"
"""What a client is told when the storage failed: no path, no SQL (the operator's log has them)."""

_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
_POSTGRES_DISK_FULL = "53100"  # SQLSTATE disk_full
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")


class PersynError(Exception):
    """Base of every error Persyn raises on purpose."""


class ConfigError(PersynError):
    """The configuration file or environment is invalid: the operator must fix it."""


class InputError(PersynError):
    """Bad input from outside (a user, a channel, a file): nothing was stored."""


class ModelError(PersynError):
    """A model call failed after retries, or a model string is unusable."""


class ModelUnavailableError(ModelError):
    """The model (or its server) could not be reached at all."""


class EmbedderUnavailable(ModelUnavailableError):
    """The encoder could not embed right now (service down, timeout, bad reply, missing
    weights). Retrieval degrades to keyword search; it never fails a turn."""


class StoreError(PersynError):
    """The storage layer failed or found an inconsistency."""


class ChannelError(PersynError):
    """A channel adapter could not deliver or receive."""


class ToolError(PersynError):
    """A tool failed; the response pipeline turns this into a result the model sees."""


def is_storage_full(error: BaseException) -> bool:
    """Whether `error`, or an error it wraps, is a full disk: SQLite's SQLITE_FULL, an
    `OSError` ENOSPC / EDQUOT, PostgreSQL's SQLSTATE 53100, or (for a wrapper that kept only
    the text, as `StoreError` does) their messages. Duck-typed on the attributes the drivers
    set (`sqlite_errorcode`, `sqlstate` / `pgcode`, a SQLAlchemy error's `orig`), so this
    module imports no driver."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        if _POSTGRES_DISK_FULL in (getattr(current, "sqlstate", None), getattr(current, "pgcode", None)):
            return True
        text = str(current).lower()
        if any(marker in text for marker in _FULL_TEXTS):
            return True
        for linked in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)
    return False
