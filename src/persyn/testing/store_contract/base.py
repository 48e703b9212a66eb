"""What every contract class shares: the store under test, opened by the `store_factory`
fixture its user supplies, and the table of which port each contract group exercises.

A group is one module of this package (`graph`, `memory`, ...) and its one class. A group
that uses optional capabilities (`store/capabilities.py`) skips, naming those missing, when the
factory's store does not offer them; a group that needs only the core is required of every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import cast

import pytest

from persyn.store import Store
from persyn.store.capabilities import FullStore, capability, capability_name
from persyn.store.ports.activity import ActivityPort
from persyn.store.ports.artifacts import ArtifactsPort
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.directory import ContactsPort
from persyn.store.ports.emotions import EmotionsPort
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.guardrails import GuardrailsPort
from persyn.store.ports.jobs import JobsPort
from persyn.store.ports.leases import LeasesPort
from persyn.store.ports.memory import MemoryPort
from persyn.store.ports.model_calls import ModelCallsPort
from persyn.store.ports.schedule import SchedulePort
from persyn.store.ports.web_keys import WebKeysPort

__all__ = ["GROUP_PORTS", "Contract", "StoreFactory", "full"]

StoreFactory = Callable[[], Store]
"""Opens a new store, not yet set up, on the one database of the running test; each call is
another connection to that database, as another process would open. It must pickle (a module-level
function or a `functools.partial` of one): the two-process test calls it in spawned interpreters."""

# Contract group (module of this package) -> the optional capabilities (their ports, from
# store/capabilities.py) its tests use besides the required core: the group skips, naming what is
# missing, on a backend without one of them. Empty: the group is required of every backend. Tests a
# backend adds in its own subclass are held to the core.
GROUP_PORTS: dict[str, tuple[type, ...]] = {
    "activity": (ActivityPort,),
    "artifacts": (ArtifactsPort,),
    "core": (ContactsPort, DialogHistoryPort),
    "dialog": (ContactsPort, DialogHistoryPort),
    "directory": (MemoryPort, ContactsPort, DialogHistoryPort),
    "graph": (ContactsPort, GraphPort),
    "guardrail_slots": (GuardrailsPort,),
    "guardrails": (EmotionsPort, GuardrailsPort),
    "jobs": (JobsPort,),
    "leases": (LeasesPort,),
    "memory": (MemoryPort, JobsPort, DialogHistoryPort),
    "model_calls": (ModelCallsPort,),
    "outbox": (),
    "people": (MemoryPort, ContactsPort),
    "recall": (MemoryPort,),
    "runs": (),
    "schedule": (SchedulePort,),
    "web_keys": (WebKeysPort,),
}


def full(store: Store) -> FullStore:
    """`store`, typed with every capability: for a store a test opens itself (another connection)
    in a group whose capabilities the `store` fixture has already found on the same backend."""
    return cast(FullStore, store)


def group_of(test: Callable[..., object]) -> str:
    """The contract group a test method belongs to: the module of this package it is written in."""
    return test.__module__.rsplit(".", 1)[-1]


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
        ports = GROUP_PORTS.get(group_of(request.function), ())  # a backend's own tests: the core
        opened = store_factory()
        await opened.setup()
        try:
            missing = [capability_name(port) for port in ports if capability(opened, port) is None]
            if missing:
                pytest.skip(f"this store offers no {', '.join(missing)}")
            yield opened
        finally:
            await opened.close()
