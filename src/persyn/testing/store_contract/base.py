"""What every contract class shares: the store under test, opened by the `store_factory`
fixture its user supplies, and the table of which port each contract group exercises.

A group is one module of this package (`graph`, `memory`, ...) and its one class. A group
whose port is a capability (`store/capabilities.py`) skips, naming the capability, when the
factory's store does not offer it; a group whose port is `Store` is required of every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from persyn.store import Store
from persyn.store.capabilities import CAPABILITIES, GraphStore, capability

__all__ = ["GROUP_PORTS", "Contract", "StoreFactory"]

StoreFactory = Callable[[], Store]
"""Opens a new store, not yet set up, on the one database of the running test; each call is
another connection to that database, as another process would open. It must pickle (a module-level
function or a `functools.partial` of one): the two-process test calls it in spawned interpreters."""

# Contract group (module of this package) -> the port its tests exercise. A port that becomes an
# optional capability: its store-shaped type from store/capabilities.py here, and the group skips
# on a backend without it. Tests a backend adds in its own subclass are held to `Store`.
GROUP_PORTS: dict[str, type[Store]] = {
    "activity": Store,
    "artifacts": Store,
    "core": Store,
    "dialog": Store,
    "directory": Store,
    "graph": GraphStore,
    "guardrail_slots": Store,
    "guardrails": Store,
    "jobs": Store,
    "leases": Store,
    "memory": Store,
    "model_calls": Store,
    "outbox": Store,
    "people": Store,
    "recall": Store,
    "runs": Store,
    "schedule": Store,
    "web_keys": Store,
}


def group_of(test: Callable[..., object]) -> str:
    """The contract group a test method belongs to: the module of this package it is written in."""
    return test.__module__.rsplit(".", 1)[-1]


def capability_name(port: type[Store]) -> str:
    """The operator's name of the capability `port` offers (`knowledge graph`), else the type's."""
    return next((name for name, offered in CAPABILITIES.items() if issubclass(port, offered)), port.__name__)


class Contract:
    """Base of every contract class. A subclass supplies `store_factory`; each test gets `store`,
    set up on a fresh database, as the port of its group, and closed after the test."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """Override in the test class: see `StoreFactory`."""
        raise NotImplementedError(
            f"{type(self).__name__} needs a `store_factory` fixture: a callable opening a new store "
            "on the test's database (persyn.testing.store_contract.StoreFactory)"
        )

    @pytest.fixture
    async def store(
        self, store_factory: StoreFactory, request: pytest.FixtureRequest
    ) -> AsyncIterator[Store]:
        """A set-up store on the test's fresh database, as its group's port; skips when the store
        does not offer that capability."""
        port = GROUP_PORTS.get(group_of(request.function), Store)  # a backend's own tests: `Store`
        opened = store_factory()
        await opened.setup()
        try:
            if capability(opened, port) is None:
                pytest.skip(f"this store offers no {capability_name(port)} ({port.__name__})")
            yield opened
        finally:
            await opened.close()
