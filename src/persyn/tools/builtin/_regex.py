"""Regular-expression filtering of model-supplied patterns, safe against runaway patterns.

Python's `re` has no timeout, and a pattern such as `(a+)+$` can backtrack for minutes on a
short text; run in the event loop it would stall every agent in the process, and in a thread
it could not be stopped. So the matching (`tools/builtin/_match.py`) runs in a short-lived child
interpreter (`tools/_isolated.py`: standard library only) that is killed when it takes longer
than the deadline. The pattern is compiled here first, so a malformed one is reported at once
without a child process.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from persyn.core.errors import ToolError
from persyn.tools._isolated import run_isolated

__all__ = ["MAX_PATTERN_CHARS", "compile_pattern", "matching"]

MAX_PATTERN_CHARS = 200
_DEADLINE_SECONDS = 3.0
_WORK = Path(__file__).with_name("_match.py")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The pattern compiled case-insensitively, or a ToolError saying what is wrong."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"the regular expression is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re.compile(pattern, re.IGNORECASE)
    except (re.error, OverflowError, RecursionError) as exc:  # a{4294967296}: OverflowError
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc


async def matching(pattern: str, texts: list[str], *, deadline: float = _DEADLINE_SECONDS) -> list[bool]:
    """Whether `pattern` (case-insensitive) occurs in each text, in order."""
    compile_pattern(pattern)
    if not texts:
        return []
    try:
        async with asyncio.timeout(deadline):  # cancelled, the child is killed
            found: list[bool] = await run_isolated(_WORK, "matching", {"pattern": pattern, "texts": texts})
    except TimeoutError:
        raise ToolError(
            f"the regular expression {pattern!r} took longer than {deadline:g} seconds and was "
            "stopped; simplify it (avoid nested repeats such as '(a+)+')"
        ) from None
    return found
