"""What a store may offer beyond the port every backend must implement (`Store`), detected
rather than assumed: the runtime asks `capability(store, GraphStore)` and degrades as SPEC
§2 says when the answer is None (no graph section in the prompt, no extraction, no graph
tools; `persyn doctor` names what is missing).

A capability is a port (`store/ports/`) a backend's store class derives from besides
`Store`; its store-shaped type (`GraphStore`: a `Store` with the graph) is what code that
needs both asks for. `CAPABILITIES` names each, for the operator.
"""

from __future__ import annotations

from abc import ABC
from typing import TypeVar

from persyn.core.errors import StoreError
from persyn.store.base import Store
from persyn.store.ports.graph import GraphPort

__all__ = ["CAPABILITIES", "GraphStore", "capability", "missing_capabilities", "require_capability"]

P = TypeVar("P")


class GraphStore(Store, GraphPort, ABC):
    """A store with the knowledge graph (SPEC §4.3)."""


# The optional capabilities by the name the operator reads, with the port that offers each.
CAPABILITIES: dict[str, type] = {"knowledge graph": GraphPort}


def capability(store: Store, port: type[P]) -> P | None:
    """`store` as `port` if it offers that capability, else None."""
    return store if isinstance(store, port) else None


def missing_capabilities(store: Store) -> list[str]:
    """The names of the optional capabilities `store` does not offer."""
    return [name for name, port in CAPABILITIES.items() if not isinstance(store, port)]


def require_capability(store: Store, port: type[P]) -> P:
    """`store` as `port`; StoreError naming the capability if it does not offer it."""
    offered = capability(store, port)
    if offered is None:
        names = [name for name, offered_by in CAPABILITIES.items() if issubclass(port, offered_by)]
        raise StoreError(f"this store offers no {names[0] if names else port.__name__}")
    return offered
