"""Storage (ARCHITECTURE §4): the `Store` port, its row types, and `open_store`."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from persyn.core.errors import ConfigError
from persyn.core.urls import masked_url
from persyn.store.base import AgentRow, Conversation, Identity, Message, Person, Role, Store
from persyn.store.capabilities import FullStore

__all__ = [
    "SUPPORTED_SCHEMES",
    "AgentRow",
    "Conversation",
    "Identity",
    "Message",
    "Person",
    "Role",
    "Store",
    "open_store",
]

SUPPORTED_SCHEMES = ("sqlite", "postgresql")


def open_store(url: str) -> FullStore:
    """The backend named by `url`'s scheme, not yet set up: callers `await store.setup()`.
    Both built-in backends offer every optional capability (`store/capabilities.py`).

    URLs are parsed as SQLAlchemy parses them (as the DBOS database URL is):
    `sqlite:///relative/path.db` and `sqlite:////absolute/path.db` open that file, creating
    its parent directories; `postgresql://user:password@host:port/database` (or a Unix
    socket: `postgresql://user@/database?host=/socket/dir`) opens that database through
    psycopg 3, whatever driver the URL names.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            f"store URL {masked_url(url)!r} is not a URL; expected e.g. 'sqlite:///data/persyn.db'"
        ) from exc
    scheme = parsed.get_backend_name()
    if scheme == "sqlite":
        return _open_sqlite(url, parsed)
    if scheme == "postgresql":
        return _open_postgres(url, parsed)
    raise ConfigError(
        f"unsupported store URL {masked_url(url)!r}: scheme {scheme!r} is not one of "
        f"{', '.join(repr(s) for s in SUPPORTED_SCHEMES)} (e.g. 'sqlite:///data/persyn.db')"
    )


def _open_sqlite(url: str, parsed: URL) -> FullStore:
    # Imported here so that choosing another backend never imports this one.
    from persyn.store.sqlite.store import SQLiteStore

    database = parsed.database or ""
    if parsed.host or parsed.query or database in ("", ":memory:") or database.startswith("file:"):
        raise ConfigError(
            f"invalid SQLite store URL {url!r}: expected 'sqlite:///path/to/file.db' with no host "
            "or options (a file: the store spans threads and processes, so ':memory:' cannot work)"
        )
    file = Path(database)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the directory for store URL {url!r}: {exc}") from exc
    return SQLiteStore(file)


def _open_postgres(url: str, parsed: URL) -> FullStore:
    # Imported here so that choosing SQLite never imports psycopg.
    from persyn.store.postgres.store import PostgresStore

    if not parsed.database:
        raise ConfigError(
            f"invalid PostgreSQL store URL {parsed.render_as_string(hide_password=True)!r}: it names no "
            "database; expected e.g. 'postgresql://persyn:secret@db.example:5432/persyn'"
        )
    return PostgresStore(parsed)
