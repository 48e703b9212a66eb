"""The regular-expression work of the memory tools (`tools/builtin/_regex.py`), standard library only:
it runs in a killable child interpreter (`tools/_isolated.py`)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["matching"]


def matching(argument: dict[str, Any]) -> list[bool]:
    """Whether `argument["pattern"]` (case-insensitive) occurs in each of `argument["texts"]`."""
    pattern = re.compile(str(argument["pattern"]), re.IGNORECASE)
    return [pattern.search(str(text)) is not None for text in argument["texts"]]
