"""Test support shipped with Persyn (ARCHITECTURE §5): deterministic model doubles selected
from configuration as `test:NAME`, so tests and the real CLI run without a paid model."""

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

__all__ = [
    "BUILTIN_DOUBLES",
    "DoubleFunction",
    "DoubleModel",
    "DoubleReply",
    "DoubleResult",
    "ScriptRule",
    "build_double",
    "echo_text",
    "last_user_text",
    "minimal_instance",
    "register_double",
    "registered_double",
    "task_of",
    "unregister_double",
]
