"""Session-wide fixtures shared by the suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from persyn.testing.postgres import PostgresForTests


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresForTests]:
    """One real PostgreSQL (with pgvector) for the whole session, started on first use."""
    server = PostgresForTests()
    try:
        yield server
    finally:
        server.stop()
