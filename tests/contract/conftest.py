"""The contract suite runs every test against every storage backend (ARCHITECTURE §4, §9):
`store_url` (tests/conftest.py) is parametrized over them; nothing in the tests themselves
names a backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from persyn.store import open_store
from persyn.store.capabilities import FullStore


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[FullStore]:
    """A set-up store on a fresh database, closed after the test."""
    opened = open_store(store_url)
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()
