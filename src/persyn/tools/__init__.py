"""Tools (SPEC §4.6): the registry the model is offered, its loop breakers, built-in tools."""

from __future__ import annotations

from persyn.tools.breaker import BreakerTrip, LoopBreaker, canonical_arguments
from persyn.tools.loop import ToolLoopResult, run_tool_loop
from persyn.tools.registry import Tool, ToolOutcome, ToolRegistry, ToolStatus

__all__ = [
    "BreakerTrip",
    "LoopBreaker",
    "Tool",
    "ToolLoopResult",
    "ToolOutcome",
    "ToolRegistry",
    "ToolStatus",
    "canonical_arguments",
    "run_tool_loop",
]
