"""The web channel adapter: live events reach the right listeners, and a listener that stops
reading is dropped without ever holding up the turn that publishes (SPEC App. B rule 5)."""

from __future__ import annotations

from datetime import UTC, datetime

from persyn.channels.web.channel import TurnUsage, WebChannel
from persyn.core.events import Event, Notice, Outbound
from persyn.core.ids import new_id
from persyn.gateway.base import SinkEvent
from persyn.usage.records import UsageRecord

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def _event(channel: str = "key-a") -> Event:
    return Event(
        id=new_id(T0), agent_id=new_id(T0), service="web", channel=channel, text="hi", received_at=T0
    )


async def test_a_listener_that_stops_reading_is_dropped_and_the_others_get_everything() -> None:
    web = WebChannel(buffer=8)
    event = _event()
    stalled = web.listen(event.agent_id, event.channel)
    reading = web.listen(event.agent_id, event.channel)
    elsewhere = web.listen(event.agent_id, "key-b")
    sink = web.sink_for(event)
    assert sink is not None
    got: list[str] = []
    for index in range(100):  # the turn publishes; nothing it calls waits for a reader
        sink(SinkEvent(phase="draft", kind="delta", text=f"w{index} "))
        while not reading.queue.empty():
            got.append(reading.queue.get_nowait().data["text"])
    assert got == [f"w{index} " for index in range(100)]
    assert stalled.dropped and stalled.queue.qsize() == 8
    assert web.stream_count == 2  # the stalled one is gone: `reading` and `elsewhere` remain
    assert elsewhere.queue.empty()  # another conversation's stream saw none of it
    web.unlisten(event.agent_id, event.channel, reading)
    web.unlisten(event.agent_id, "key-b", elsewhere)
    assert web.stream_count == 0


async def test_a_turn_waiter_sees_its_own_events_in_order() -> None:
    web = WebChannel()
    event, other = _event(), _event()
    waiter = web.wait_for(event.id, event.channel)
    sink = web.sink_for(event)
    assert sink is not None
    sink(SinkEvent(phase="draft", kind="delta", text="Hi"))
    other_sink = web.sink_for(other)
    assert other_sink is not None
    other_sink(SinkEvent(phase="draft", kind="delta", text="not yours"))
    await web.notice(event, Notice(level="info", text="Ada chose silence: busy"))
    await web.deliver(
        Outbound(
            event_id=event.id,
            agent_id=event.agent_id,
            service="web",
            channel=event.channel,
            conversation_id=new_id(T0),
            message_id=new_id(T0),
            text="Hi",
        )
    )
    web.deliberation_done(event, 2)
    seen = []
    while not waiter.queue.empty():
        seen.append(waiter.queue.get_nowait())
    assert [item.type for item in seen] == ["token", "withdraw", "notice", "message", "deliberation_done"]
    assert seen[2].data["text"] == "Ada chose silence: busy"
    assert seen[4].data == {"objections": 2}
    web.stop_waiting(event.id)
    sink(SinkEvent(phase="draft", kind="delta", text="late"))
    assert waiter.queue.empty()


def test_turn_usage_adds_up_a_turns_calls_and_forgets_them_once_taken() -> None:
    usage = TurnUsage()
    turn = new_id(T0)

    def record(thread: str | None, tokens_in: int, tokens_out: int) -> UsageRecord:
        return UsageRecord(
            id=new_id(T0), at=T0, agent_id=None, stage="respond", model="test:echo", tier="test",
            input_tokens=tokens_in, output_tokens=tokens_out, cache_read_tokens=tokens_in // 2, thread_id=thread,
        )  # fmt: skip

    usage.handle(record(turn, 30, 5))
    usage.handle(record(turn, 12, 3))
    usage.handle(record(new_id(T0), 1000, 1000))
    usage.handle(record(None, 7, 7))
    assert usage.take(turn) == (42, 8)  # cache reads are part of the input, not added to it
    assert usage.take(turn) == (0, 0)


async def test_a_tool_call_is_shown_live_its_arguments_to_an_operator_only() -> None:
    web = WebChannel(buffer=8)
    event = _event()
    listener = web.listen(event.agent_id, event.channel)
    sink = web.sink_for(event)
    assert sink is not None
    arguments = '{"to": "Sam", "text": "How is chapter two going?"}'
    sink(SinkEvent(phase="draft", kind="tool_start", text="message_contact", arguments=arguments))
    sink(SinkEvent(phase="draft", kind="tool_end", text="message_contact", status="ok"))
    start, end = listener.queue.get_nowait(), listener.queue.get_nowait()
    head = {"type": "token", "event_id": event.id, "phase": "draft", "text": "message_contact"}
    assert start.payload(operator=True) == {**head, "kind": "tool_start", "arguments": arguments}
    assert start.payload() == start.payload(operator=False) == {**head, "kind": "tool_start"}
    assert end.payload() == end.payload(operator=True) == {**head, "kind": "tool_end", "status": "ok"}
