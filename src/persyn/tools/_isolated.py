"""CPU-bound tool work in a child interpreter that is killed when it is stopped.

A handler that computes (exact arithmetic, a regular expression over many texts) cannot be
interrupted on the event loop — `asyncio.timeout` only fires at an `await`, so ten characters
of arithmetic once held every agent, the scheduler and the DBOS workers of the process for
28 s — and a thread cannot be killed. So the work runs in a fresh interpreter (`-I -S`: no
site packages, no environment, no bytecode written; about 20 ms to start) that loads one standard-library-only
module *by its file* (the `persyn.tools` package would import pydantic-ai: over a second) and
calls one function with JSON in, JSON out. Cancelling the awaiting task — the registry's
`[tools] cpu_seconds` limit, a deadline here, or a shutdown — kills the child, so the work
really stops.

A `ValueError` the function raises is its refusal, reported as a `ToolError` with its
message; anything else is reported with its type.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from persyn.core.errors import ToolError

__all__ = ["IsolatedWork", "run_isolated"]

_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_persyn_isolated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
job = json.load(sys.stdin)
try:
    reply = {"result": getattr(module, job["function"])(job["argument"])}
except ValueError as exc:
    reply = {"refused": str(exc)}
except Exception as exc:
    reply = {"failed": f"{type(exc).__name__}: {exc}"}
json.dump(reply, sys.stdout)
"""


class IsolatedWork:
    """A function of a standard-library-only module, to be run in a killable child: the mark
    on a `Tool` whose work is CPU-bound (`Tool.isolated`)."""

    __slots__ = ("function", "module")

    def __init__(self, module: str | Path, function: str) -> None:
        self.module = Path(module)
        self.function = function

    def __repr__(self) -> str:
        return f"IsolatedWork({self.module.name!r}, {self.function!r})"

    async def __call__(self, argument: Any, *, deadline: float | None = None) -> Any:
        return await run_isolated(self.module, self.function, argument, deadline=deadline)


async def run_isolated(module: Path, function: str, argument: Any, *, deadline: float | None = None) -> Any:
    """`function(argument)` of the module file `module`, in a child interpreter; the child is
    killed when this is cancelled or `deadline` seconds pass (then a `ToolError`)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        "-B",  # writes no bytecode next to the module
        "-c",
        _CHILD,
        str(module),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    job = json.dumps({"function": function, "argument": argument}).encode()
    try:
        async with asyncio.timeout(deadline):
            out, err = await child.communicate(job)
    except TimeoutError:
        raise ToolError(f"the work took longer than {deadline:g} seconds and was stopped") from None
    finally:
        if child.returncode is None:  # cancelled or out of time: stop the work itself
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
    if child.returncode != 0:
        raise ToolError(f"the work could not be run: {err.decode(errors='replace')[-300:]}")
    reply: dict[str, Any] = json.loads(out)
    if "refused" in reply:
        raise ToolError(str(reply["refused"]))
    if "failed" in reply:
        raise ToolError(str(reply["failed"]))
    return reply["result"]
