"""Persyn's own backends pass the storage contract that ships in the library
(`persyn.testing.store_contract`, ARCHITECTURE §4): `store_url` (tests/conftest.py) is
parametrized over SQLite and PostgreSQL, so every contract test runs once per backend and
nothing here names one.
"""

from __future__ import annotations

import functools

import pytest

from persyn.store import open_store
from persyn.testing.store_contract import StoreContract, StoreFactory


class TestStoreContract(StoreContract):
    @pytest.fixture
    def store_factory(self, store_url: str) -> StoreFactory:
        """A new connection to the test's fresh database of each backend."""
        return functools.partial(open_store, store_url)
