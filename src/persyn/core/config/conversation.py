"""`[conversation]`: when conversations close, and how much of them a prompt carries.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field

from persyn.core.section import Section

__all__ = ["ConversationConfig"]


class ConversationConfig(Section):
    """Conversations: when they close, how much of them a prompt carries."""

    idle_timeout_minutes: float = Field(
        default=30.0, gt=0, description="An idle conversation closes, and is consolidated into a memory."
    )
    recent_dialog_messages: int = Field(
        default=20, ge=0, le=500, description="How many recent messages of the dialog each prompt carries."
    )
    max_message_chars: int = Field(default=32_000, ge=1, description="Longer inbound messages are refused.")
    # One extraction call per several exchanges, not per turn.
    extract_every_messages: int = Field(
        default=8,
        ge=0,
        le=200,
        description=(
            "Observations and the knowledge graph are extracted in the background every this many new "
            "messages of an open conversation (each read once), and when it closes; 0 = only when it closes."
        ),
    )
