"""Reading what a model double was sent, and the stock replies of the background stages.

A function double (`persyn.testing.register_double`) is handed the request as pydantic-ai
messages; scenarios decide what to answer from what those messages say. These are the
readings every scenario needs, written once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo

from persyn.testing.models import DoubleReply

__all__ = ["CONSOLIDATION_RUBRIC", "consolidation_reply", "last_input", "request_text", "tool_returns"]

CONSOLIDATION_RUBRIC = (
    "emotional_significance",
    "decisions",
    "novelty",
    "continuing_themes",
    "explicit_importance",
)
_SPEAKER_TAG = re.compile(r"^\[[^\]\n]{1,80}\]\s*")
_CONTINUE = "(Continue.)"


def tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results the latest request carries back to the model (none on a new input)."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return []
    return [part for part in last.parts if isinstance(part, ToolReturnPart)]


def last_input(messages: Sequence[ModelMessage]) -> str:
    """The latest thing said to the agent, without its "[speaker]" tag. "(Continue.)", which
    ends a request whose dialog ends with the agent, is skipped: it is nobody's input."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    text = _SPEAKER_TAG.sub("", part.content.strip(), count=1)
                    if text != _CONTINUE:
                        return text
    return ""


def request_text(messages: Sequence[ModelMessage], info: AgentInfo) -> str:
    """Everything the model was sent, the instructions and every message part, as one text:
    what a leak test searches for a secret."""
    parts = [info.instructions or ""]
    for message in messages:
        parts.extend(str(getattr(part, "content", "")) for part in message.parts)
    return "\n".join(parts)


def consolidation_reply(
    task: str | None, *, importance: int = 4, sensitivity: str = "private"
) -> DoubleReply | None:
    """A valid summary and rating for consolidation's stages; None for any other task, so a
    double can answer `consolidation_reply(task) or ...`."""
    if task == "summarize":
        return DoubleReply(output={"summary": "I talked with someone.", "tags": []})
    if task == "rate":
        scores = dict.fromkeys(CONSOLIDATION_RUBRIC, 3)
        return DoubleReply(output={**scores, "importance": importance, "sensitivity": sensitivity})
    return None
