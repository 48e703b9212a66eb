"""The entry points of a group (`persyn.channels`, `persyn.channel_settings`, `persyn.tools`): how
a chat network or a tool group joins by one folder and its lines in `pyproject.toml`.

In `core` because the configuration loads through it too: `core/config/chat.py` builds the
`[channels]` section from the `persyn.channel_settings` entries, the way the gateway finds a model
provider by its `persyn.model_providers` entry, so `core` names no chat network in its imports.

The installed distributions declare them in their metadata. When persyn runs from a source
checkout (its `pyproject.toml` beside `src/`), that file's entries replace the
installed persyn's: metadata written by an earlier install does not hide a group added since, nor
keep one since removed. Other distributions' entries (plugins) are kept either way.
"""

from __future__ import annotations

import logging
import tomllib
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TypeVar

__all__ = ["declared", "loaded", "loaded_by_name"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_CHECKOUT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def declared(group: str) -> list[EntryPoint]:
    """The entry points of `group`, sorted by name."""
    points = {point.name: point for point in entry_points(group=group)}
    checkout = _checkout_points(group)
    if checkout is not None:
        points = {name: point for name, point in points.items() if not _persyns(point)} | checkout
    return [points[name] for name in sorted(points)]


def loaded(group: str, kind: type[T]) -> list[T]:
    """What the entry points of `group` name, each loaded and checked to be a `kind`. One that
    fails to load, or is something else, is logged and skipped: the rest of the group still works."""
    return list(loaded_by_name(group, kind).values())


def loaded_by_name(group: str, kind: type[T]) -> dict[str, T]:
    """`loaded`, by each entry point's name (`irc = ...` is `"irc"`), sorted by name."""
    found: dict[str, T] = {}
    for point in declared(group):
        try:
            value = point.load()
        except Exception:
            log.warning("%s entry %r (%s) failed to load", group, point.name, point.value, exc_info=True)
            continue
        if not isinstance(value, kind):
            log.warning("%s entry %r (%s) is not a %s", group, point.name, point.value, kind.__name__)
            continue
        found[point.name] = value
    return found


def _persyns(point: EntryPoint) -> bool:
    return point.dist is not None and point.dist.name == "persyn"


def _checkout_points(group: str) -> dict[str, EntryPoint] | None:
    """The checkout's own entries of `group`; None when persyn does not run from a checkout."""
    try:
        project = tomllib.loads(_CHECKOUT.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if project.get("name") != "persyn":
        return None
    table: dict[str, str] = project.get("entry-points", {}).get(group, {})
    return {name: EntryPoint(name, value, group) for name, value in table.items()}
