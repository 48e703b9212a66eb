"""The console under test: the real runtime (`persyn.testing.run_runtime`: SQLite, DBOS, the
gateway, the meter) with a scripted model double, and the real `ConsoleApp` driven by
Textual's `Pilot`. Waits are on conditions, never on time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from textual.pilot import Pilot

from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.testing.models import (
    DoubleReply,
    last_user_text,
    minimal_instance,
    output_schema,
)
from persyn.testing.requests import tool_returns

WAIT_SECONDS = 60.0


class Mind:
    """`test:console`: one scripted behaviour per phrase the operator types."""

    def __init__(self) -> None:
        self.stages: list[tuple[str | None, str]] = []  # (task, what it was given)

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        said = last_user_text(messages)
        self.stages.append((task, said))
        if task == "respond":
            return self._respond(said, messages)
        if task == "critique":
            if "sailed" in said and "provenance critic" in (info.instructions or ""):
                return Critique(
                    objections=(
                        Objection(
                            kind="false-premise",
                            span="we sailed in May",
                            explanation="there was no such trip",
                        ),
                    )
                )
            return Critique()
        if task == "refine":
            return "I don't actually remember us sailing together."
        if task == "decide":
            if "withdraw" in said or "I could say a lot" in said:
                return Decision(action="silent", reason="it was not mine to answer")
            return Decision(action="speak", reason="it answers what was asked")
        schema = output_schema(info)  # summaries, extraction: their smallest valid answer
        return minimal_instance(schema) if schema is not None else DoubleReply(text="ok")

    def _respond(self, said: str, messages: list[ModelMessage]) -> DoubleReply:
        if "has come due" in said:
            return DoubleReply(text="Time to water the plants!")
        if "remind me" in said:
            if not tool_returns(messages):
                return DoubleReply(
                    tool_calls=[
                        {"name": "set_reminder", "args": {"objective": "water the plants", "in_minutes": 60}}
                    ]
                )
            return DoubleReply(text="I will remind you.")
        if "withdraw" in said:
            return DoubleReply(text="I could say a lot about that.")
        if "sailing" in said:
            return DoubleReply(text="Yes, we sailed in May.")
        if "add" in said:
            if not tool_returns(messages):
                return DoubleReply(
                    text="Let me work that out.",
                    tool_calls=[{"name": "calculate", "args": {"expression": "2+2"}}],
                )
            return DoubleReply(text=" It is **4**.")
        return DoubleReply(text="Hello there, *friend*. Nice to see you.")


async def until(pilot: Pilot[Any], condition: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Let the app run until `condition` holds; fails after `WAIT_SECONDS` (a broken test)."""
    loop = pilot.app._loop  # pyright: ignore[reportPrivateUsage]
    assert loop is not None
    deadline = loop.time() + WAIT_SECONDS
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            shown = [
                getattr(c, "content", getattr(c, "source", c)) for c in pilot.app.query("#transcript > *")
            ]
            raise AssertionError(f"timed out waiting for {what}; the transcript: {shown!r}")
        await pilot.pause(0.02)


async def say(pilot: Pilot[Any], text: str) -> None:
    """Type `text` into the focused widget and press enter."""
    for key in text:
        await pilot.press(key if key != " " else "space")
    await pilot.press("enter")
