"""The runtime end to end in-process: real SQLite files, real DBOS queues, model doubles."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dbos import DBOS
from pydantic_ai.exceptions import ModelHTTPError

from persyn.channels.base import Channel as ChannelPort
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.errors import InputError
from persyn.core.events import CompletionMarker, Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.runtime.app import Runtime
from persyn.store.base import Message
from persyn.testing import registered_double
from persyn.testing.meter import RecordingAdapter

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class RecordingChannel(ChannelPort):
    service = "test"

    def __init__(self, *, sink_raises: bool = False) -> None:
        self.delivered: list[Outbound] = []
        self.notices: list[Notice] = []
        self.streamed: list[str] = []
        self.sink_raises = sink_raises

    async def deliver(self, outbound: Outbound) -> None:
        self.delivered.append(outbound)

    async def notice(self, event: Event, notice: Notice) -> None:
        self.notices.append(notice)

    def sink_for(self, event: Event) -> SinkCallable | None:
        def sink(item: SinkEvent) -> None:
            if self.sink_raises:
                raise RuntimeError("the console fell over")
            if item.kind == "delta":
                self.streamed.append(item.text)

        return sink


def _settings(home: Path, model: str = "test:echo") -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(f'[models]\ndefault = "{model}"\n[metering]\nevent_log = false\n')
    settings = load_settings(home, environ={})
    return settings.model_copy(update={"agents": [AgentConfig(name="Ada", id=new_id(START))]})


def _event(agent: AgentConfig, text: str, at: datetime, speaker: str = "sam") -> Event:
    return Event(
        id=new_id(at),
        agent_id=agent.id,
        service="test",
        channel="room",
        speaker=Speaker(service="test", channel="room", speaker_id=speaker, display_name=speaker.title()),
        text=text,
        received_at=at,
    )


@pytest.fixture
async def started(
    tmp_path: Path,
) -> AsyncIterator[tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock]]:
    clock = ManualClock(START)
    adapter = RecordingAdapter()
    runtime = Runtime(_settings(tmp_path / "home"), clock=clock, extra_meter_adapters=[adapter])
    channel = RecordingChannel()
    runtime.channels["test"] = channel
    await runtime.start(workers=True)
    try:
        yield runtime, channel, adapter, clock
    finally:
        await runtime.stop()


async def test_an_event_is_answered_stored_and_metered(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
) -> None:
    runtime, channel, adapter, _clock = started
    agent = runtime.settings.agents[0]
    event = _event(agent, "Hello Ada", START)
    await runtime.submit(event)
    marker = await runtime.wait_marker(agent.id, event.id, timeout=30)
    assert marker.transmitted
    assert marker.text == "You said: Hello Ada"
    assert [o.text for o in channel.delivered] == ["You said: Hello Ada"]
    assert "".join(channel.streamed) == "You said: Hello Ada"
    conversation_id = channel.delivered[0].conversation_id
    dialog = await runtime.store.recent_messages(agent.id, conversation_id, 10)
    assert [(m.role.value, m.speaker_name, m.text) for m in dialog] == [
        ("user", "Sam", "Hello Ada"),
        ("agent", "Ada", "You said: Hello Ada"),
    ]
    assert runtime.meter.flush()
    # "You said: ..." speaks about the past, so it is substantive: this channel is not
    # interactive, so deliberation ran inline (provenance + one lens), then the decision.
    stages = sorted(r.stage for r in adapter.records)
    assert stages[0].startswith("critique:") and stages[0] != "critique:provenance"
    assert stages[1] == "critique:provenance"
    assert stages[2:] == ["decide", "respond"]
    assert all(r.thread_id == event.id and r.conversation_id == conversation_id for r in adapter.records)
    record = next(r for r in adapter.records if r.stage == "respond")
    assert (record.stage, record.agent_id, record.surface, record.channel) == (
        "respond",
        agent.id,
        "test",
        "room",
    )
    assert record.conversation_id == conversation_id
    assert record.thread_id == event.id


async def test_a_redelivered_event_runs_once(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
) -> None:
    runtime, channel, adapter, _clock = started
    agent = runtime.settings.agents[0]
    event = _event(agent, "only once", START)
    await runtime.submit(event)
    await runtime.wait_marker(agent.id, event.id, timeout=30)
    await runtime.submit(event)  # the channel delivered it again
    await runtime.wait_marker(agent.id, event.id, timeout=30)
    assert len(channel.delivered) == 1
    assert runtime.meter.flush()
    stages = [r.stage for r in adapter.records]
    assert stages.count("respond") == 1 and stages.count("decide") == 1
    assert len(stages) == 4  # respond, two critics, decide: none of them twice


async def test_an_activation_reads_its_event_from_the_store_once(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime, channel, _adapter, _clock = started
    agent = runtime.settings.agents[0]
    reads: list[str] = []
    get_event = runtime.store.get_event

    async def counted(agent_id: str, event_id: str) -> Event | None:
        reads.append(event_id)
        return await get_event(agent_id, event_id)

    monkeypatch.setattr(runtime.store, "get_event", counted)
    first, second = _event(agent, "one", START), _event(agent, "two", START + timedelta(seconds=1))
    # Submitted here: the activation takes the event from the submit, no read at all.
    await runtime.submit(first)
    assert (await runtime.wait_marker(agent.id, first.id, timeout=30)).transmitted
    assert reads == []
    # Enqueued by someone else (as another process's submit would be): read once, by
    # receive; respond and transmit reuse it.
    await runtime.store.save_event(second)
    await runtime._enqueue_activation(agent.id, second.id)  # pyright: ignore[reportPrivateUsage]
    assert (await runtime.wait_marker(agent.id, second.id, timeout=30)).transmitted
    assert reads == [second.id]
    assert [o.text for o in channel.delivered] == ["You said: one", "You said: two"]


async def test_an_activation_reads_the_dialog_once(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prompt, both critics, the decision and the redundancy gate see the conversation's
    dialog from one read."""
    runtime, channel, adapter, _clock = started
    agent = runtime.settings.agents[0]
    reads: list[str] = []
    turn_messages = runtime.store.turn_messages

    async def counted(agent_id: str, conversation_id: str, input_id: str, limit: int) -> list[Message]:
        reads.append("room")
        return await turn_messages(agent_id, conversation_id, input_id, limit)

    monkeypatch.setattr(runtime.store, "turn_messages", counted)
    event = _event(agent, "Do you remember what we said?", START)
    await runtime.submit(event)
    assert (await runtime.wait_marker(agent.id, event.id, timeout=30)).transmitted
    assert [o.text for o in channel.delivered] == ["You said: Do you remember what we said?"]
    assert runtime.meter.flush()
    assert {r.stage for r in adapter.records} >= {"respond", "critique:provenance", "decide"}
    assert reads == ["room"]


async def test_a_worker_waiting_for_a_marker_reads_the_store_every_tenth_of_a_second(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A marker this process puts wakes its waiter; the store is read only for one another
    worker put, ten times a second (a backoff from 5 ms would read it eight times in the
    first 0.4 s, taking CPU from the turn being waited for)."""
    runtime, _channel, _adapter, _clock = started
    agent = runtime.settings.agents[0]
    reads: list[float] = []
    get_marker = runtime.store.get_marker
    loop = asyncio.get_running_loop()

    async def counted(agent_id: str, event_id: str, now: datetime) -> CompletionMarker | None:
        reads.append(loop.time())
        return await get_marker(agent_id, event_id, now)

    monkeypatch.setattr(runtime.store, "get_marker", counted)
    started_at = loop.time()
    with pytest.raises(TimeoutError):
        await runtime.wait_marker(agent.id, new_id(START), timeout=0.45)
    assert reads[0] - started_at < 0.05  # a marker already there is found at once
    assert 4 <= len(reads) <= 6
    gaps = [later - earlier for earlier, later in itertools.pairwise(reads)]
    assert all(gap >= 0.09 for gap in gaps[:-1])  # the last read is at the deadline


async def test_the_dbos_executor_id_comes_from_the_config(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    settings = settings.model_copy(
        update={"dispatch": settings.dispatch.model_copy(update={"executor_id": "worker-a"})}
    )
    runtime = Runtime(settings, clock=ManualClock(START))
    await runtime.start(workers=True)
    try:
        agent = settings.agents[0]
        event = _event(agent, "hello", START)
        await runtime.submit(event)
        await runtime.wait_marker(agent.id, event.id, timeout=30)
        status = await DBOS.get_workflow_status_async(event.id)
        assert status is not None and status.executor_id == "worker-a"
    finally:
        await runtime.stop()


async def test_invalid_input_is_rejected_before_anything_is_stored(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
) -> None:
    runtime, _channel, _adapter, _clock = started
    agent = runtime.settings.agents[0]
    good = _event(agent, "fine", START)
    with pytest.raises(InputError, match="invalid event id"):
        await runtime.submit(good.model_copy(update={"id": "not-an-id"}))
    with pytest.raises(InputError, match="unknown agent id"):
        await runtime.submit(good.model_copy(update={"agent_id": new_id()}))
    with pytest.raises(InputError, match="the limit is 32000"):
        await runtime.submit(good.model_copy(update={"text": "x" * 32_001}))
    assert await runtime.store.get_event(agent.id, good.id) is None
    assert await runtime.store.count_messages(agent.id) == 0


async def test_a_broken_sink_never_reaches_generation(tmp_path: Path) -> None:
    runtime = Runtime(_settings(tmp_path / "home"), clock=ManualClock(START))
    channel = RecordingChannel(sink_raises=True)
    runtime.channels["test"] = channel
    await runtime.start(workers=True)
    try:
        agent = runtime.settings.agents[0]
        event = _event(agent, "still there?", START)
        await runtime.submit(event)
        marker = await runtime.wait_marker(agent.id, event.id, timeout=30)
    finally:
        await runtime.stop()
    assert marker.transmitted
    assert [o.text for o in channel.delivered] == ["You said: still there?"]


async def test_a_failing_model_degrades_to_a_notice_not_a_crash(tmp_path: Path) -> None:
    def broken(task: str | None, messages: object, info: object) -> str:
        raise ModelHTTPError(status_code=400, model_name="broken", body="bad request")

    with registered_double("broken", broken):
        runtime = Runtime(_settings(tmp_path / "home", "test:broken"), clock=ManualClock(START))
        channel = RecordingChannel()
        runtime.channels["test"] = channel
        await runtime.start(workers=True)
        try:
            agent = runtime.settings.agents[0]
            event = _event(agent, "hello?", START)
            await runtime.submit(event)
            marker = await runtime.wait_marker(agent.id, event.id, timeout=30)
            # The agent keeps answering once the model works again.
            assert await runtime.store.count_messages(agent.id) == 1
        finally:
            await runtime.stop()
    assert not marker.transmitted
    assert marker.reason is not None
    assert "could not produce a reply" in marker.reason
    assert "400" in marker.reason
    assert channel.delivered == []
    assert [n.level for n in channel.notices] == ["error"]


async def test_idle_conversations_close_and_run_their_hooks(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
) -> None:
    runtime, channel, _adapter, clock = started
    agent = runtime.settings.agents[0]
    seen: list[tuple[str, str]] = []

    async def hook(agent_id: str, conversation_id: str) -> None:
        seen.append((agent_id, conversation_id))

    runtime.add_conversation_hook("record", hook)
    first = _event(agent, "first conversation", START)
    await runtime.submit(first)
    await runtime.wait_marker(agent.id, first.id, timeout=30)
    conversation_id = channel.delivered[0].conversation_id

    clock.advance(timedelta(minutes=29))
    assert await runtime.close_idle_conversations() == 0
    clock.advance(timedelta(minutes=2))
    assert await runtime.close_idle_conversations() == 1
    for _ in range(200):
        if seen:
            break
        await _sleep()
    assert seen == [(agent.id, conversation_id)]
    closed = await runtime.store.get_conversation(agent.id, conversation_id)
    assert closed is not None
    assert closed.closed_at is not None

    later = _event(agent, "a new day", clock.now())
    await runtime.submit(later)
    await runtime.wait_marker(agent.id, later.id, timeout=30)
    assert channel.delivered[-1].conversation_id != conversation_id


async def _sleep() -> None:
    import asyncio

    await asyncio.sleep(0.05)


async def test_culling_and_dialog_retention_on_a_moved_clock(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
) -> None:
    from persyn.core.records import MemoryRecord

    runtime, channel, _adapter, clock = started
    agent = runtime.settings.agents[0]
    event = _event(agent, "a passing remark", START)
    await runtime.submit(event)
    await runtime.wait_marker(agent.id, event.id, timeout=30)
    trivial = MemoryRecord(
        id=new_id(START),
        agent_id=agent.id,
        created_at=START,
        channel="test:room",
        summary="Small talk.",
        importance=2,
    )
    vital = MemoryRecord(
        id=new_id(START),
        agent_id=agent.id,
        created_at=START,
        channel="test:room",
        summary="Sam's wedding.",
        importance=9,
    )
    for record in (trivial, vital):
        await runtime.store.add_record(record, None, None)
    clock.advance(timedelta(days=13))
    assert await runtime.cull_memories() == 0  # too young to cull
    clock.advance(timedelta(days=2))
    assert await runtime.cull_memories() == 1
    assert [r.id for r in await runtime.store.list_records(agent.id)] == [vital.id]
    # Verbatim dialog outlives the retention window only as the memories made from it.
    assert await runtime.close_idle_conversations() == 1
    assert await runtime.purge_old_dialog() == 0
    clock.advance(timedelta(days=91))  # the window counts from when the conversation closed
    assert await runtime.purge_old_dialog() == 2
    assert await runtime.store.count_messages(agent.id) == 0
    assert channel.delivered


async def test_a_crash_between_close_and_consolidation_loses_nothing(
    started: tuple[Runtime, RecordingChannel, RecordingAdapter, ManualClock],
) -> None:
    runtime, channel, _adapter, clock = started
    agent = runtime.settings.agents[0]
    consolidated: list[str] = []

    async def hook(agent_id: str, conversation_id: str) -> None:
        consolidated.append(conversation_id)
        await runtime.store.set_flag(agent_id, "consolidated:" + conversation_id, "stored")

    runtime.add_conversation_hook("consolidate", hook)
    event = _event(agent, "remember this evening", START)
    await runtime.submit(event)
    await runtime.wait_marker(agent.id, event.id, timeout=30)
    # The conversation is closed in the store, then the process dies before the hooks
    # are enqueued: nothing in the queue knows about it.
    clock.advance(timedelta(hours=1))
    closed = await runtime.store.close_idle_conversations(agent.id, clock.now(), 1800)
    assert [c.id for c in closed] == [channel.delivered[0].conversation_id]
    # After the restart the scheduler's sweep finds it and consolidation runs, once.
    clock.advance(timedelta(minutes=5))
    assert await runtime.sweep_unconsolidated() == 1
    for _ in range(200):
        if consolidated:
            break
        await _sleep()
    assert consolidated == [closed[0].id]
    assert await runtime.sweep_unconsolidated() == 0
