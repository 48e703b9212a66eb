"""PostgreSQL engines for the store: psycopg 3 through SQLAlchemy's `postgresql+psycopg`
dialect, the writers' advisory lock and the readers' snapshots (see `postgres.py`)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection

__all__ = ["TEXT_CONFIG", "WRITE_LOCK", "create_postgres_engine", "driver_url", "redacted", "server_settings"]

# The text search configuration every tsvector and query names; migration 2 creates it
# (`migrations.py`).
TEXT_CONFIG = "persyn_text"

# Arbitrary constant naming "Persyn store writes" among PostgreSQL advisory locks.
WRITE_LOCK = 0x7065_7273_7772


def driver_url(url: URL) -> URL:
    """`url` with the psycopg 3 driver, whatever driver (or none) it named."""
    return url.set(drivername="postgresql+psycopg")


def redacted(url: URL) -> str:
    """The URL as errors may show it: never the password."""
    return url.render_as_string(hide_password=True)


def _json_serializer(value: object) -> str:
    """JSON columns hold readable text, as on SQLite (the memory tsvector reads the tags)."""
    return json.dumps(value, ensure_ascii=False)


def create_postgres_engine(url: URL, *, writer: bool, pool_size: int) -> Engine:
    """A writer engine's transactions start by taking `WRITE_LOCK` (transaction-scoped,
    released at commit or rollback); a reader engine's are REPEATABLE READ, READ ONLY, so a
    batch of reads sees one snapshot. Callers dispose() it."""
    engine = create_engine(
        driver_url(url),
        pool_size=pool_size,
        max_overflow=0,
        # No pre-ping (a round trip per transaction): a connection the server dropped fails
        # one call with a StoreError, is discarded by the pool, and the next call reconnects.
        json_serializer=_json_serializer,
    )
    if not writer:
        return engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)

    # The parts test `rowcount == 1` after INSERT … ON CONFLICT DO NOTHING ("was it new?");
    # SQLAlchemy keeps an INSERT's rowcount for psycopg only when asked to.
    engine = engine.execution_options(preserve_rowcount=True)

    @event.listens_for(engine, "begin")
    def _lock(connection: Connection) -> None:  # pyright: ignore[reportUnusedFunction]
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")

    return engine


def server_settings(connection: Connection) -> dict[str, Any]:
    """What `persyn doctor` reports: the server version and pgvector's, if installed."""
    version = connection.exec_driver_sql("SHOW server_version").scalar_one()
    vector = connection.exec_driver_sql(
        "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
    ).scalar_one_or_none()
    available = connection.exec_driver_sql(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
    ).scalar_one_or_none()
    return {"server_version": version, "vector": vector, "vector_available": available}
