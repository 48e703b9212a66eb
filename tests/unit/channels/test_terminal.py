"""The terminal's rendering of the token-sink phases (SPEC App. B rules 1–4)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from persyn.channels.terminal.channel import TerminalChannel
from persyn.core.config import AgentConfig
from persyn.core.events import Event, Notice, Outbound
from persyn.core.ids import new_id
from persyn.gateway.base import SinkEvent

AGENT = AgentConfig(name="Ada", id=new_id())


def _event() -> Event:
    return Event(
        id=new_id(),
        agent_id=AGENT.id,
        service="terminal",
        channel="terminal",
        text="hi",
        received_at=datetime(2026, 11, 30, tzinfo=UTC),
    )


def _outbound(event: Event, text: str) -> Outbound:
    return Outbound(
        event_id=event.id,
        agent_id=AGENT.id,
        service="terminal",
        channel="terminal",
        conversation_id=new_id(),
        message_id=new_id(),
        text=text,
    )


def _stream(channel: TerminalChannel, event: Event, phase: str, text: str) -> None:
    sink = channel.sink_for(event)
    assert sink is not None
    for word in text.split(" "):
        sink(SinkEvent(phase=phase, kind="delta", text=word + " "))
    sink(SinkEvent(phase=phase, kind="end"))


async def test_a_streamed_draft_that_is_sent_as_is_is_not_printed_twice() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    event = _event()
    _stream(channel, event, "draft", "Hello there")
    await channel.deliver(_outbound(event, "Hello there"))
    assert out.getvalue() == "Ada: Hello there \n"


async def test_a_suppressed_draft_is_withdrawn_and_the_reason_for_silence_shown() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    event = _event()
    _stream(channel, event, "draft", "I could say something")
    await channel.notice(event, Notice(level="info", text="Ada chose silence: nothing to add"))
    assert out.getvalue().splitlines() == [
        "Ada: I could say something ",
        "· (the draft above was withdrawn)",
        "· Ada chose silence: nothing to add",
    ]


async def test_inline_revision_streams_under_the_draft_then_the_refined_reply_is_committed() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    event = _event()
    _stream(channel, event, "draft", "We sailed in May")
    _stream(channel, event, "revise", "I don't remember sailing")
    await channel.deliver(_outbound(event, "I don't remember sailing."))
    assert out.getvalue().splitlines() == [
        "Ada: We sailed in May ",
        "  ↳ revising: I don't remember sailing ",
        "· (revised)",
        "Ada: I don't remember sailing.",
    ]


async def test_deferred_revision_streams_below_the_committed_reply_and_is_then_cleared() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=True)
    event = _event()
    _stream(channel, event, "draft", "We sailed in May")
    await channel.deliver(_outbound(event, "We sailed in May"))
    committed = out.getvalue()
    _stream(channel, event, "revise", "Actually I do not remember that")
    shown = out.getvalue()[len(committed) :]
    assert "reconsidering" in shown and "remember " in shown
    assert "\x1b[1A\r\x1b[J" in shown  # the working surface was erased when it ended
    assert shown.rstrip().endswith("(reconsidered; I'll fold that into my next reply)\x1b[0m")
    channel.deliberation_done(event, 1)  # idempotent: nothing more is printed
    assert out.getvalue()[len(committed) :] == shown


async def test_text_before_a_tool_call_is_a_committed_segment() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    event = _event()
    sink = channel.sink_for(event)
    assert sink is not None
    sink(SinkEvent(phase="draft", kind="delta", text="Let me check."))
    sink(SinkEvent(phase="draft", kind="tool_start", text="calendar"))
    sink(SinkEvent(phase="draft", kind="tool_end"))
    sink(SinkEvent(phase="draft", kind="delta", text=" You are free."))
    await channel.deliver(_outbound(event, "Let me check. You are free."))
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["Ada: Let me check.", "· (using calendar…)"]
    assert "(the draft above was withdrawn)" not in out.getvalue()


async def test_the_answer_after_a_tool_is_sent_alone_and_not_shown_as_revised() -> None:
    """The tool loop's reply is its last answer; the narration before the tool is already
    committed on screen. Printing "(revised)" and the answer again said something changed."""
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    event = _event()
    sink = channel.sink_for(event)
    assert sink is not None
    sink(SinkEvent(phase="draft", kind="delta", text="Let me work that out."))
    sink(SinkEvent(phase="draft", kind="tool_start", text="calculate"))
    sink(SinkEvent(phase="draft", kind="tool_end"))
    sink(SinkEvent(phase="draft", kind="delta", text="It is 391."))
    await channel.deliver(_outbound(event, "It is 391."))
    assert out.getvalue().splitlines() == [
        "Ada: Let me work that out.",
        "· (using calculate…)",
        "Ada: It is 391.",
    ]
    # A tool turn whose answer was not streamed: the answer is printed, not marked revised.
    quiet = _event()
    sink = channel.sink_for(quiet)
    assert sink is not None
    sink(SinkEvent(phase="draft", kind="delta", text="Checking."))
    sink(SinkEvent(phase="draft", kind="tool_start", text="calculate"))
    await channel.deliver(_outbound(quiet, "It is 42."))
    assert out.getvalue().splitlines()[-3:] == ["Ada: Checking.", "· (using calculate…)", "Ada: It is 42."]
    # An answer after the tool that was refined before it was sent is still marked.
    refined = _event()
    sink = channel.sink_for(refined)
    assert sink is not None
    sink(SinkEvent(phase="draft", kind="delta", text="One moment."))
    sink(SinkEvent(phase="draft", kind="tool_start", text="calculate"))
    sink(SinkEvent(phase="draft", kind="delta", text="It is 390."))
    await channel.deliver(_outbound(refined, "One moment. It is 391."))
    assert out.getvalue().splitlines()[-2:] == ["· (revised)", "Ada: It is 391."]


async def test_a_drafts_leading_whitespace_and_trailing_newlines_are_not_printed() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    event = _event()
    sink = channel.sink_for(event)
    assert sink is not None
    for piece in ("\n", " ", " Hi", " there.", "\n", "\n"):  # as a small local model streams
        sink(SinkEvent(phase="draft", kind="delta", text=piece))
    sink(SinkEvent(phase="draft", kind="end"))
    await channel.deliver(_outbound(event, "Hi there."))
    assert out.getvalue() == "Ada: Hi there.\n"
    # A newline inside a reply is kept.
    second = _event()
    sink = channel.sink_for(second)
    assert sink is not None
    for piece in ("One.", "\n", "Two."):
        sink(SinkEvent(phase="draft", kind="delta", text=piece))
    await channel.deliver(_outbound(second, "One.\nTwo."))
    assert out.getvalue().endswith("Ada: One.\nTwo.\n")


async def test_a_message_that_waited_is_marked_as_missed_and_shown_once_per_outbox_id() -> None:
    out = io.StringIO()
    channel = TerminalChannel(AGENT, out, color=False)
    sent_at = datetime(2026, 11, 30, 14, 3, tzinfo=UTC)
    outbound = _outbound(_event(), "Time to water the plants.").model_copy(
        update={"outbox_id": new_id(), "sent_at": sent_at, "while_away": True}
    )
    assert await channel.deliver_outbound(outbound) is True
    assert await channel.deliver_outbound(outbound) is False  # redelivered: not shown again
    when = sent_at.astimezone().strftime("%Y-%m-%d %H:%M")
    assert out.getvalue() == f"· (while you were away at {when})\nAda: Time to water the plants.\n"
    assert channel.serves(AGENT.id) and not channel.serves(new_id())
    assert channel.interactive and channel.streams_tokens
