"""Test support shipped with Persyn (ARCHITECTURE §5): deterministic model doubles selected
from configuration as `test:NAME`, so tests and the real CLI run without a paid model, and
the runtime test harness (`run_runtime`, `Pilot`: `persyn.testing.harness`).

The harness is exported lazily: it imports the whole runtime (DBOS included), which a CLI
run that only needs a double or `test:hash` should not pay for."""

from typing import TYPE_CHECKING, Any

from persyn.testing.models import (
    BUILTIN_DOUBLES,
    DoubleFunction,
    DoubleModel,
    DoubleReply,
    DoubleResult,
    ScriptRule,
    build_double,
    echo_text,
    last_user_text,
    minimal_instance,
    register_double,
    registered_double,
    task_of,
    unregister_double,
)
from persyn.testing.requests import consolidation_reply, last_input, request_text, tool_returns

if TYPE_CHECKING:
    from persyn.testing.harness import (
        ADA,
        START,
        Pilot,
        RecordingChannel,
        Turn,
        Where,
        harness_settings,
        run_runtime,
    )

_HARNESS = frozenset(
    {"ADA", "START", "Pilot", "RecordingChannel", "Turn", "Where", "harness_settings", "run_runtime"}
)

__all__ = [
    "ADA",
    "BUILTIN_DOUBLES",
    "START",
    "DoubleFunction",
    "DoubleModel",
    "DoubleReply",
    "DoubleResult",
    "Pilot",
    "RecordingChannel",
    "ScriptRule",
    "Turn",
    "Where",
    "build_double",
    "consolidation_reply",
    "echo_text",
    "harness_settings",
    "last_input",
    "last_user_text",
    "minimal_instance",
    "register_double",
    "registered_double",
    "request_text",
    "run_runtime",
    "task_of",
    "tool_returns",
    "unregister_double",
]


def __getattr__(name: str) -> Any:
    if name in _HARNESS:
        from persyn.testing import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'persyn.testing' has no attribute {name!r}")
