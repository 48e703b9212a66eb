"""What a store may offer beyond the port every backend must implement (`Store`), detected
rather than assumed: the runtime asks `capability(store, GuardrailsPort)` once, where the
collaborator that needs it is built, and degrades as SPEC §2 says when the answer is None
(each collaborator's docstring says how: no graph section in the prompt, no guardrail
evaluation, web keys refused...); an operator's command that needs one it lacks exits 2
naming it (`command_capability`); `persyn doctor` lists what is offered and what is missing.

A capability is a port (`store/ports/`) a backend's store class derives from besides
`Store`; its store-shaped type (`GraphStore`: a `Store` with the graph) is what code that
needs both asks for. `CAPABILITIES` names each, for the operator. Both built-in backends
offer every one (`FullStore`).
"""

from __future__ import annotations

from abc import ABC
from typing import TypeVar

from persyn.core.errors import InputError, StoreError
from persyn.store.base import Store
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

__all__ = [
    "CAPABILITIES",
    "ContactsStore",
    "FullStore",
    "GraphStore",
    "MemoryStore",
    "ScheduleStore",
    "capability",
    "capability_name",
    "command_capability",
    "missing_capabilities",
    "offered_capabilities",
    "require_capability",
]

P = TypeVar("P")


class GraphStore(Store, GraphPort, ABC):
    """A store with the knowledge graph (SPEC §4.3)."""


class ScheduleStore(Store, SchedulePort, ABC):
    """A store with reminders and goals (SPEC §4.7, §4.8)."""


class ContactsStore(Store, ContactsPort, ABC):
    """A store with the contact directory (SPEC §4.5): contacts found by name, curated."""


class MemoryStore(Store, MemoryPort, ABC):
    """A store with autobiographical memory: records and their vectors, quick facts and
    observations about people (SPEC §4.1, §4.4)."""


# The optional capabilities by the name the operator reads, with the port that offers each.
CAPABILITIES: dict[str, type] = {
    "autobiographical memory": MemoryPort,
    "dialog history": DialogHistoryPort,
    "contact directory": ContactsPort,
    "knowledge graph": GraphPort,
    "guardrail history": GuardrailsPort,
    "emotion history": EmotionsPort,
    "artifacts": ArtifactsPort,
    "web keys": WebKeysPort,
    "channel leases": LeasesPort,
    "activity log": ActivityPort,
    "consolidation jobs": JobsPort,
    "model-call checkpoints": ModelCallsPort,
    "reminders and goals": SchedulePort,
}


class FullStore(
    MemoryStore,
    ContactsStore,
    GraphStore,
    ScheduleStore,
    GuardrailsPort,
    EmotionsPort,
    ArtifactsPort,
    WebKeysPort,
    LeasesPort,
    ActivityPort,
    JobsPort,
    ModelCallsPort,
    DialogHistoryPort,
    ABC,
):
    """A store with every capability: what both SQL backends are (`store/sql/store.py`), so
    what the store contract suite and the data-moving commands work with."""


def capability(store: object, port: type[P]) -> P | None:
    """`store` as `port` if it offers that capability, else None."""
    return store if isinstance(store, port) else None


def capability_name(port: type) -> str:
    """The operator's name of the capability `port` is (or includes)."""
    names = [name for name, offered_by in CAPABILITIES.items() if issubclass(port, offered_by)]
    return names[0] if names else port.__name__


def offered_capabilities(store: Store) -> list[str]:
    """The names of the optional capabilities `store` offers."""
    return [name for name, port in CAPABILITIES.items() if isinstance(store, port)]


def missing_capabilities(store: Store) -> list[str]:
    """The names of the optional capabilities `store` does not offer."""
    return [name for name, port in CAPABILITIES.items() if not isinstance(store, port)]


def require_capability(store: Store, port: type[P]) -> P:
    """`store` as `port`; StoreError naming the capability if it does not offer it."""
    offered = capability(store, port)
    if offered is None:
        raise StoreError(f"this store offers no {capability_name(port)}")
    return offered


def command_capability(store: Store, port: type[P]) -> P:
    """`store` as `port` for an operator's command; InputError (exit 2) naming the capability
    if the store does not offer it."""
    offered = capability(store, port)
    if offered is None:
        name = capability_name(port)
        raise InputError(f"this store offers no {name} (the {name!r} capability is absent)")
    return offered
