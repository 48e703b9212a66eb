"""The composition root: injected collaborators are the ones the runtime uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.runtime.compose import build_runtime
from persyn.store import open_store
from persyn.testing import RecordingChannel
from persyn.testing.meter import RecordingAdapter

START = datetime(2026, 11, 30, 9, tzinfo=UTC)


def _exists(path: Path) -> bool:
    return path.exists()


async def test_build_runtime_uses_the_injected_store_clock_channel_and_meter(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "persyn.toml").write_text('[models]\ndefault = "test:echo"\n[metering]\nevent_log = false\n')
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id(START))
    settings = settings.model_copy(update={"agents": [agent]})
    elsewhere = tmp_path / "injected.db"
    store = open_store(f"sqlite:///{elsewhere}")
    clock = ManualClock(START)
    channel = RecordingChannel()
    adapter = RecordingAdapter()
    runtime = build_runtime(
        settings, clock=clock, store=store, channels={"test": channel}, meter_adapters=[adapter]
    )
    assert runtime.store is store and runtime.clock is clock
    async with runtime:
        event = Event(
            id=new_id(START),
            agent_id=agent.id,
            service="test",
            channel="room",
            speaker=Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam"),
            text="Hello Ada",
            received_at=START,
        )
        await runtime.submit(event)
        marker = await runtime.wait_marker(agent.id, event.id, timeout=60)
        assert marker.transmitted
        messages = await store.recent_messages(agent.id, channel.delivered[0].conversation_id, 10)
    # The reply went to the injected channel, is in the injected store, stamped by the
    # injected clock, and was metered through the injected adapter.
    assert [o.text for o in channel.delivered] == ["You said: Hello Ada"]
    assert [m.text for m in messages][-1] == "You said: Hello Ada"
    assert all(abs(m.created_at - START) < timedelta(seconds=1) for m in messages)
    assert _exists(elsewhere)
    assert not _exists(Path(settings.database_url.removeprefix("sqlite:///")))
    assert runtime.meter.flush()
    assert "respond" in [r.stage for r in adapter.records]
