"""A real runtime (SQLite, DBOS, a moved clock) answered by a model double the test plays,
for the cost and loop-bound regressions (`test_cost_*.py`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart

from persyn.channels.base import Channel as ChannelPort
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable
from persyn.runtime.app import Runtime
from persyn.testing.meter import RecordingAdapter

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(START))


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results the latest request carries back to the model."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return []
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


class Channel(ChannelPort):
    service = "test"
    interactive = False

    def __init__(self) -> None:
        self.delivered: list[Outbound] = []
        self.notices: list[str] = []

    async def deliver(self, outbound: Outbound) -> None:
        self.delivered.append(outbound)

    async def notice(self, event: Event, notice: Notice) -> None:
        self.notices.append(notice.text)

    def sink_for(self, event: Event) -> SinkCallable | None:
        return None


async def start_runtime(
    tmp_path: Path, double: str, extra: str = ""
) -> tuple[Runtime, Channel, RecordingAdapter]:
    """Reminders fire by hand (`autonomy.fire_due`): no DBOS schedule races the test."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    if "[autonomy]" in extra:
        extra = extra.replace("[autonomy]\n", "[autonomy]\nschedule = false\n")
    else:
        extra += "[autonomy]\nschedule = false\n"
    (home / "persyn.toml").write_text(
        f'[models]\ndefault = "test:{double}"\n[metering]\nevent_log = false\n'
        '[memory]\nembedder = "test:hash"\n[deliberation]\nenabled = false\n' + extra
    )
    settings = load_settings(home, environ={}).model_copy(update={"agents": [AGENT]})
    adapter = RecordingAdapter()
    runtime = Runtime(settings, clock=ManualClock(START), extra_meter_adapters=[adapter])
    channel = Channel()
    runtime.channels["test"] = channel
    await runtime.start(workers=True)
    return runtime, channel, adapter


async def say(
    runtime: Runtime, text: str, speaker: str = "sam", name: str = "Sam", channel: str = "room"
) -> tuple[Event, Any]:
    """A message on test:<channel>, waited for to its completion marker."""
    now = runtime.clock.now()
    event = Event(
        id=new_id(now),
        agent_id=AGENT.id,
        service="test",
        channel=channel,
        speaker=Speaker(service="test", channel=channel, speaker_id=speaker, display_name=name),
        text=text,
        received_at=now,
    )
    await runtime.submit(event)
    marker = await runtime.wait_marker(AGENT.id, event.id, timeout=120)
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(seconds=5))
    return event, marker


async def idle(runtime: Runtime) -> None:
    """Until no activation of the agent is queued or running."""
    for _ in range(400):
        if not await runtime.busy(AGENT.id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the agent stayed busy")
