"""A store that offers only the required core of the storage port (`persyn.store.base.Store`)
and no capability (`persyn.store.capabilities`): what the smallest conforming backend looks
like to the runtime, for tests that the runtime degrades as SPEC §2 says.

`core_only_store(inner)` hands every abstract method of `Store` to a real store (`inner`:
SQLite in the tests) and offers nothing else, so `missing_capabilities` names every
capability; the operations that span sub-ports (`record_inbound`, `record_reply`) run as the
port's defaults, method by method. No mock: every call reaches a real database.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from persyn.store.base import Store

__all__ = ["core_only_store"]


class _CoreOnly(Store):
    """The core of `inner`, method by method (`_delegate`)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: _CoreOnly, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


for _name in sorted(Store.__abstractmethods__):
    setattr(_CoreOnly, _name, _delegate(_name))
abc.update_abstractmethods(_CoreOnly)


def core_only_store(inner: Store) -> Store:
    """`inner`'s required core, and none of its capabilities."""
    # Its abstract methods are filled in above (`update_abstractmethods`), which a type
    # checker does not follow.
    return _CoreOnly(inner)  # pyright: ignore[reportAbstractUsage]
