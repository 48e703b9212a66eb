"""The contract suite runs every test against every storage backend (ARCHITECTURE §4, §9).

A backend is added by adding its name to `BACKENDS` and a branch to `_fresh_url`; nothing
in the tests themselves names a backend. PostgreSQL is a real server (`pgserver`), started
once per session; each test gets a new database on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from persyn.store import Store, open_store

BACKENDS = ["sqlite", "postgresql"]


def _fresh_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'persyn.db'}"  # absolute: sqlite:////tmp/...
    if backend == "postgresql":
        return request.getfixturevalue("postgres_server").fresh_schema()
    raise AssertionError(f"no fresh-database recipe for backend {backend!r}")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database of each backend, not yet set up."""
    return _fresh_url(request.param, request, tmp_path)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """A set-up store on a fresh database, closed after the test."""
    opened = open_store(store_url)
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()
