"""The real runtime for the provenance scenarios (tests/security/test_provenance_*.py): DBOS,
SQLite, the tool loop, a manual clock, and a function double named by the test."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo

from persyn.channels.base import Channel as ChannelPort
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable
from persyn.runtime.app import Runtime
from persyn.runtime.autonomy import recent_activity
from persyn.testing.models import DoubleReply

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(START))
_RUBRIC = ("emotional_significance", "decisions", "novelty", "continuing_themes", "explicit_importance")


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return []
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


def last_input(messages: list[ModelMessage]) -> str:
    """The latest thing said to the agent, without its "[speaker]" tag ("(Continue.)", which
    ends a request whose dialog ends with the agent, is skipped)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    text = re.sub(r"^\[[^\]\n]{1,80}\]\s*", "", part.content.strip(), count=1)
                    if text != "(Continue.)":
                        return text
    return ""


def request_text(messages: list[ModelMessage], info: AgentInfo) -> str:
    """Everything the model was sent: the instruction and every message part."""
    parts = [info.instructions or ""]
    for message in messages:
        parts.extend(str(getattr(part, "content", "")) for part in message.parts)
    return "\n".join(parts)


def background_reply(task: str | None) -> Any:
    """Consolidation's summary and rating; None for any other task."""
    if task == "summarize":
        return DoubleReply(output={"summary": "I talked with someone.", "tags": []})
    if task == "rate":
        return DoubleReply(output={**dict.fromkeys(_RUBRIC, 3), "importance": 4, "sensitivity": "private"})
    return None


class Channel(ChannelPort):
    service = "test"
    interactive = False

    async def deliver(self, outbound: Outbound) -> None:
        return None

    async def notice(self, event: Event, notice: Notice) -> None:
        return None

    def sink_for(self, event: Event) -> SinkCallable | None:
        return None


async def start_runtime(
    tmp_path: Path, double: str, *, memory: str = "", deliberation: str = "enabled = false"
) -> Runtime:
    """`memory` adds lines to `[memory]`; `deliberation` is the `[deliberation]` table's body."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(
        f'[models]\ndefault = "test:{double}"\n[metering]\nevent_log = false\n'
        f'[memory]\nembedder = "test:hash"\n{memory}\n[deliberation]\n{deliberation}\n'
        "[autonomy]\nschedule = false\n"
    )
    settings = load_settings(home, environ={}).model_copy(update={"agents": [AGENT]})
    runtime = Runtime(settings, clock=ManualClock(START))
    runtime.channels["test"] = Channel()
    await runtime.start(workers=True)
    return runtime


def advance(runtime: Runtime, by: timedelta) -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    clock.advance(by)


async def say(runtime: Runtime, channel: str, speaker: str, text: str) -> None:
    """`speaker` says `text` on test:`channel`; returns once the reply was sent."""
    await idle(runtime)
    now = runtime.clock.now()
    event = Event(
        id=new_id(now),
        agent_id=AGENT.id,
        service="test",
        channel=channel,
        speaker=Speaker(service="test", channel=channel, speaker_id=speaker, display_name=speaker.title()),
        text=text,
        received_at=now,
    )
    await runtime.submit(event)
    marker = await runtime.wait_marker(AGENT.id, event.id, timeout=60)
    assert marker.transmitted, marker
    advance(runtime, timedelta(seconds=5))


async def idle(runtime: Runtime) -> None:
    """No activation queued or running (a heartbeat would be skipped as busy)."""
    for _ in range(600):
        if not await runtime.busy(AGENT.id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the agent stayed busy")


async def fire(runtime: Runtime, by: timedelta) -> None:
    """Move the clock on by `by`, fire what is due (one run) and wait until it is logged."""
    await idle(runtime)
    before = len(await recent_activity(runtime.store, AGENT.id))
    advance(runtime, by)
    assert await runtime.autonomy.fire_due() == 1
    for _ in range(600):
        if len(await recent_activity(runtime.store, AGENT.id)) > before:
            advance(runtime, timedelta(seconds=5))  # what is said next comes after the run
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never finished")
