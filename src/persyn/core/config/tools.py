"""`[tools]`: the respond step's tool loop and its loop breakers.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field

from persyn.core.section import Section

__all__ = ["DEFERRED_TOOLS", "ToolsConfig"]


# Rarely needed built-ins: named in `call_tool`'s description rather than defined in full.
DEFERRED_TOOLS = (
    "cancel_reminder",
    "edit_reminder",
    "inspect_self",
    "list_goals",
    "query_graph",
    "read_attachment",
    "recall_dialog",
    "recent_activity",
    "search_dialog",
    "update_goal",
    "workspace_list",
    "workspace_read",
    "workspace_write",
    "write_skill",
)


class ToolsConfig(Section):
    """The tool loop of the respond step (SPEC §4.6) and its loop breakers.

    A round-trip is one model reply that asks for tools and gets their results back; past
    `max_round_trips` in one activation, further calls are refused and the model must
    answer. Of the calls in one reply, at most `max_calls_per_round` run. A call with the same
    tool name and the same arguments as `max_identical_calls` earlier ones in the activation is
    refused without running. Every refusal is recorded.
    """

    enabled: bool = Field(
        default=True,
        description=(
            "Offer the agent's own tools to the respond model (never to the bundled tiny model, which "
            "cannot call them)."
        ),
    )
    max_round_trips: int = Field(default=6, ge=1, le=50, description="Tool round-trips per activation.")
    max_identical_calls: int = Field(
        default=2, ge=1, le=20, description="Identical calls (same tool, same arguments) per activation."
    )
    max_calls_per_round: int = Field(
        default=8,
        ge=1,
        le=100,
        description="Tool calls run from one model reply; the rest get an error result saying so.",
    )
    call_timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="A tool still running after this long is reported as failed."
    )
    cpu_seconds: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="CPU-bound tools (exact arithmetic) are killed after this long.",
    )
    max_result_chars: int = Field(
        default=8000,
        ge=200,
        le=1_000_000,
        description="Longest tool result the model is shown; longer ones are cut.",
    )
    deferred: list[str] = Field(
        default_factory=lambda: list(DEFERRED_TOOLS),
        description=(
            "Tools offered by name and summary only, behind one `call_tool` tool that shows a tool's "
            "arguments when asked and runs it (shell patterns: '*__*' = every MCP tool; [] = offer all "
            "in full). Saves prompt tokens on every call."
        ),
    )
