"""Regular-expression filtering of model-supplied patterns, safe against runaway patterns.

Python's `re` has no timeout, and a pattern such as `(a+)+$` can backtrack for minutes on a
short text; run in the event loop it would stall every agent in the process, and in a thread
it could not be stopped. So the matching runs in a short-lived child interpreter (stdlib
only, no site packages) that is killed when it takes longer than the deadline. The pattern
is compiled here first, so a malformed one is reported at once without a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys

from persyn.core.errors import ToolError

__all__ = ["MAX_PATTERN_CHARS", "compile_pattern", "matching"]

MAX_PATTERN_CHARS = 200
_DEADLINE_SECONDS = 3.0

_CHILD = """
import json, re, sys
job = json.load(sys.stdin)
pattern = re.compile(job["pattern"], re.IGNORECASE)
json.dump([pattern.search(text) is not None for text in job["texts"]], sys.stdout)
"""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The pattern compiled case-insensitively, or a ToolError saying what is wrong."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"the regular expression is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc


async def matching(pattern: str, texts: list[str], *, deadline: float = _DEADLINE_SECONDS) -> list[bool]:
    """Whether `pattern` (case-insensitive) occurs in each text, in order."""
    compile_pattern(pattern)
    if not texts:
        return []
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        "-c",
        _CHILD,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    job = json.dumps({"pattern": pattern, "texts": texts}).encode()
    try:
        async with asyncio.timeout(deadline):
            out, err = await child.communicate(job)
    except TimeoutError:
        raise ToolError(
            f"the regular expression {pattern!r} took longer than {deadline:g} seconds and was "
            "stopped; simplify it (avoid nested repeats such as '(a+)+')"
        ) from None
    finally:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
    if child.returncode != 0:
        raise ToolError(f"the regular expression {pattern!r} could not be run: {err.decode()[-300:]}")
    found: list[bool] = json.loads(out)
    return found
