"""The console's live cognition (SPEC App. B rules 1-5), its identity and its outbox, through
the real runtime and the real app (Textual `run_test()` + `Pilot`)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Input, Markdown, Static

from persyn.channels.terminal.channel import operator_speaker
from persyn.cli.commands.serve import chat_runtime
from persyn.console import ConsoleApp, ConsoleChannel, Operator, Update
from persyn.console.transcript import Draft, Indicator, Transcript, WorkingSurface
from persyn.core.clock import ManualClock
from persyn.core.events import Event, Outbound
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.store import open_store
from persyn.testing import ADA, START, harness_settings, run_runtime
from persyn.testing import Pilot as RuntimePilot

from .kit import Mind, say, until

LOGIN = "sam"
DELIBERATE = "[deliberation]\nsubstantive_min_words = 1\n"  # every reply is weighed


def _text(widget: Widget) -> str:
    if isinstance(widget, Markdown):
        return (widget.source or "").strip()
    if isinstance(widget, Static):
        content = widget.content
        return content.plain if isinstance(content, Text) else str(content)
    return ""


def lines(app: ConsoleApp) -> list[str]:
    """The transcript, entry by entry, as the operator reads it."""
    return [_text(child) for child in app.query_one(Transcript).children]


@asynccontextmanager
async def console(
    tmp_path: Path, *, config: str = "", name: str | None = None
) -> AsyncIterator[tuple[RuntimePilot, ConsoleApp, Pilot[Any]]]:
    async with run_runtime(tmp_path / "home", model="test:console", config=config, channels={}) as runtime:
        app = ConsoleApp(
            runtime.runtime,
            runtime.agent,
            login=LOGIN,
            model_label="test:console",
            operator=Operator(runtime.settings, runtime.agent, runtime.clock.now),
            display_name=name,
            cursor_blink=False,
        )
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, app.ready.is_set, "the console to connect")
            yield runtime, app, pilot


def _sink(app: ConsoleApp, runtime: RuntimePilot) -> tuple[Event, SinkCallable]:
    """A turn's token sink, as the runtime gets it from the console's channel."""
    event = Event(
        id=new_id(),
        agent_id=runtime.agent.id,
        service="terminal",
        channel="terminal",
        text="hi",
        received_at=runtime.clock.now(),
    )
    sink = app.channel.sink_for(event)
    assert sink is not None
    return event, sink


def _outbound(runtime: RuntimePilot, event: Event, text: str) -> Outbound:
    return Outbound(
        event_id=event.id,
        agent_id=runtime.agent.id,
        service="terminal",
        channel="terminal",
        conversation_id=new_id(),
        message_id=new_id(),
        text=text,
    )


async def test_a_streamed_draft_becomes_the_transmitted_reply_rendered_as_markdown(
    tmp_path: Path, mind: Mind
) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        await say(pilot, "hello")
        await until(pilot, lambda: any(isinstance(c, Markdown) for c in app.transcript.children), "a reply")
        assert lines(app)[1:] == ["sam: hello", "**Ada:** Hello there, *friend*. Nice to see you."]
        assert not app.query(Draft)  # the streamed text was presentation only (rule 1)
        assert app.focused is app.query_one("#composer")  # the composer kept focus
        dialog = await runtime.store.channel_messages(runtime.agent.id, "terminal", "terminal", 10)
        assert [m.text for m in dialog] == ["hello", "Hello there, *friend*. Nice to see you."]


async def test_a_withdrawn_draft_is_replaced_by_the_reason_for_silence(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path, config=DELIBERATE) as (runtime, app, pilot):
        await say(pilot, "please withdraw")
        await until(pilot, lambda: any("chose silence" in t for t in lines(app)), "the silence notice")
        await pilot.pause()
        assert lines(app)[1:] == ["sam: please withdraw", "· chose silence: it was not mine to answer"]
        notice = app.transcript.children[-1]
        assert notice.has_class("notice-silence") and not notice.has_class("notice-error")
        assert not app.query(Draft)
        dialog = await runtime.store.channel_messages(runtime.agent.id, "terminal", "terminal", 10)
        assert [m.text for m in dialog] == ["please withdraw"]  # nothing streamed was recorded


async def test_a_deferred_revision_streams_below_the_committed_reply_and_is_cleared(
    tmp_path: Path, mind: Mind
) -> None:
    async with console(tmp_path, config=DELIBERATE) as (runtime, app, pilot):
        await say(pilot, "remember sailing?")
        await until(pilot, lambda: any("reconsidered" in t for t in lines(app)), "deliberation to end")
        await runtime.settle()
        await pilot.pause()
        assert lines(app)[1:] == [
            "sam: remember sailing?",
            "**Ada:** Yes, we sailed in May.",
            "· reconsidered; I'll fold that into my next reply",
        ]
        assert not app.query(WorkingSurface)  # cleared once deliberation finished
        assert [s for s, _ in mind.stages].count("refine") == 1  # it did stream a revision


async def test_the_working_surface_shows_the_revision_while_it_streams(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        event, sink = _sink(app, runtime)
        for word in ("We ", "sailed."):
            sink(SinkEvent(phase="draft", kind="delta", text=word))
        await app.channel.deliver(_outbound(runtime, event, "We sailed."))
        for word in ("I ", "don't ", "remember ", "that."):
            sink(SinkEvent(phase="revise", kind="delta", text=word))
        # Refreshes are throttled: wait for the whole revision, not the surface's first frame.
        await until(
            pilot, lambda: "↳ reconsidering: I don't remember that." in lines(app), "the working surface"
        )
        await pilot.pause()
        assert lines(app)[1:] == ["**Ada:** We sailed.", "↳ reconsidering: I don't remember that."]
        sink(SinkEvent(phase="revise", kind="end"))
        await until(pilot, lambda: not app.query(WorkingSurface), "the surface to clear")
        assert lines(app)[1:] == ["**Ada:** We sailed.", "· reconsidered; I'll fold that into my next reply"]


async def test_a_tool_call_commits_the_segment_before_it_and_clears_its_indicator(
    tmp_path: Path, mind: Mind
) -> None:
    async with console(tmp_path, config="[deliberation]\nenabled = false\n") as (_, app, pilot):
        await say(pilot, "add two and two")
        # The delivered answer (Markdown), not the draft that streamed the same words before it.
        await until(pilot, lambda: "**Ada:** It is **4**." in lines(app), "the answer")
        await pilot.pause()
        assert lines(app)[1:] == [
            "sam: add two and two",
            "**Ada:** Let me work that out.",
            "**Ada:** It is **4**.",
        ]
        assert not app.query(Indicator)


async def test_the_tool_indicator_shows_while_the_tool_runs(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        _, sink = _sink(app, runtime)
        sink(SinkEvent(phase="draft", kind="delta", text="Let me check."))
        sink(SinkEvent(phase="draft", kind="tool_start", text="calendar"))
        await until(pilot, lambda: bool(app.query(Indicator)), "the indicator")
        await pilot.pause()
        assert lines(app)[1:] == ["Ada: Let me check.", "using calendar…"]
        assert [d.has_class("segment") for d in app.query(Draft)] == [True]
        sink(SinkEvent(phase="draft", kind="tool_end"))
        sink(SinkEvent(phase="draft", kind="delta", text="You are free."))
        await until(pilot, lambda: not app.query(Indicator), "the indicator to clear")
        await pilot.pause()
        assert lines(app)[1:] == ["Ada: Let me check.", "Ada: You are free."]  # a new segment


async def test_a_display_that_raises_never_blocks_generation(tmp_path: Path, mind: Mind) -> None:
    def broken(update: Update) -> None:
        raise RuntimeError("the console fell over")

    async with run_runtime(tmp_path / "home", model="test:console", channels={}) as runtime:
        channel = ConsoleChannel(runtime.agent, broken)
        await runtime.runtime.attach_channel(channel)
        _, marker = await runtime.say("hello", service="terminal", channel="terminal", speaker="operator:sam")
        assert marker.transmitted and marker.text == "Hello there, *friend*. Nice to see you."
        channel.closed = True  # a console that has gone: nothing posted, the next turn too
        _, marker = await runtime.say("hello", service="terminal", channel="terminal", speaker="operator:sam")
        assert marker.transmitted


async def test_updates_from_other_threads_are_shown_in_arrival_order(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        _, sink = _sink(app, runtime)
        words = [f"w{i} " for i in range(200)]

        def stream() -> None:
            for word in words:
                sink(SinkEvent(phase="draft", kind="delta", text=word))

        worker = threading.Thread(target=stream)
        worker.start()
        worker.join()
        await until(pilot, lambda: "".join(app.transcript.drafts()) == "".join(words), "the whole draft")


async def test_name_changes_only_the_display_name_and_is_remembered(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        person_id = app.person_id
        await say(pilot, "/name Samantha")
        await until(pilot, lambda: any("will call you Samantha" in t for t in lines(app)), "the rename")
        await say(pilot, "hello")
        await until(pilot, lambda: any(isinstance(c, Markdown) for c in app.transcript.children), "a reply")
        assert "Samantha: hello" in lines(app)
        again, remembered = await runtime.runtime.resolve_speaker(runtime.agent.id, operator_speaker(LOGIN))
        assert (again, remembered) == (person_id, "Samantha")  # the same person, a new name
        people = await runtime.full_store.list_persons(runtime.agent.id)
        assert [p.id for p in people if p.kind == "human"] == [person_id]
    async with console(tmp_path) as (runtime, app, pilot):  # next time: remembered
        assert app.display_name == "Samantha" and app.person_id == person_id
    async with console(tmp_path, name="Sammy") as (runtime, app, pilot):  # an explicit name wins
        assert app.display_name == "Sammy"


async def test_unprompted_messages_arrive_while_away_and_then_live(tmp_path: Path, mind: Mind) -> None:
    where: dict[str, Any] = {"service": "terminal", "channel": "terminal", "speaker": f"operator:{LOGIN}"}
    quiet = "[autonomy]\nheartbeat_minutes = 10080\n"  # a week: only the reminder fires here
    async with run_runtime(tmp_path / "home", model="test:console", config=quiet, channels={}) as runtime:
        # Asked in an earlier session; the reminder fires while no console is open.
        _, marker = await runtime.say("please remind me to water the plants", **where)
        assert marker.text == "I will remind you."
        assert await runtime.fire(by=timedelta(hours=2)) == 1
        app = ConsoleApp(
            runtime.runtime, runtime.agent, login=LOGIN, model_label="test:console", cursor_blink=False
        )
        async with app.run_test(size=(100, 30)) as pilot:
            await until(
                pilot, lambda: "**Ada:** Time to water the plants!" in lines(app), "the missed reminder"
            )
            shown = lines(app)
            assert shown[1:] == [
                f"· while you were away at {START.astimezone():%Y-%m-%d %H:%M}",  # when each was sent
                "**Ada:** I will remind you.",
                f"· while you were away at {(START + timedelta(hours=2)).astimezone():%Y-%m-%d %H:%M}",
                "**Ada:** Time to water the plants!",
            ]
            # With the console open, the next one arrives live, not as missed.
            await say(pilot, "remind me again please")
            await until(pilot, lambda: lines(app).count("**Ada:** I will remind you.") == 2, "the reply")
            assert await runtime.fire(by=timedelta(hours=2)) == 1
            await until(
                pilot,
                lambda: lines(app).count("**Ada:** Time to water the plants!") == 2,
                "the live reminder",
            )
            assert sum("while you were away" in t for t in lines(app)) == 2  # the first two only


async def test_stored_markup_and_control_characters_are_shown_as_written(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        await say(pilot, "/name [red]Boss[/red]")
        await until(pilot, lambda: any("will call you" in t for t in lines(app)), "the rename")
        assert lines(app)[-1] == "· Ada will call you [red]Boss[/red] from now on."
        _, sink = _sink(app, runtime)
        sink(SinkEvent(phase="draft", kind="delta", text="evil \x1b[2J text"))
        await until(pilot, lambda: any("evil" in t for t in lines(app)), "the draft")
        await pilot.pause()
        assert lines(app)[-1] == "Ada: evil \\x1b[2J text"  # the escape is shown, not obeyed
        composer = app.query_one("#composer", Input)
        composer.value = "x" * 40_000  # pasted: over the message size limit, refused, nothing stored
        await pilot.press("enter")
        await until(pilot, lambda: app.transcript.children[-1].has_class("notice-error"), "the refusal")
        assert "40000" in lines(app)[-1] or "40,000" in lines(app)[-1] or "too long" in lines(app)[-1]
        dialog = await runtime.store.channel_messages(runtime.agent.id, "terminal", "terminal", 10)
        assert dialog == []


async def test_a_runtime_that_fails_to_start_refuses_turns_and_quits_with_1(
    tmp_path: Path, mind: Mind
) -> None:
    # A real failure: the configuration names a local model whose weights file is not there,
    # so the runtime's start raises (after the store opened), as `persyn console` meets it.
    missing = tmp_path / "no-such-weights.gguf"
    settings = harness_settings(tmp_path / "home", model=f"local:{missing}")
    async with chat_runtime(settings, ManualClock(START)) as (_, starting):
        app = ConsoleApp(starting, ADA, login=LOGIN, model_label=f"local:{missing}", cursor_blink=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, app.ready.is_set, "the start to end")
            assert app.failed and app.runtime is None
            assert lines(app)[-1] == f"· error: local model file {str(missing)!r} does not exist"
            assert app.transcript.children[-1].has_class("notice-error")
            await say(pilot, "hello")
            await until(pilot, lambda: "nothing was sent" in lines(app)[-1], "the refusal")
            assert lines(app)[-2:] == ["sam: hello", "· error: the runtime did not start; nothing was sent"]
            await say(pilot, "/name Sammy")
            await until(pilot, lambda: "nothing was changed" in lines(app)[-1], "the refused rename")
            assert app.focused is app.query_one("#composer")  # still typing, still on screen
            await pilot.press("ctrl+q")
        assert app.return_value == 1  # what `persyn console` exits with
    # Nothing was stored: no message, no contact for the operator.
    store = open_store(settings.database_url)
    await store.setup()
    try:
        assert await store.channel_messages(ADA.id, "terminal", "terminal", 10) == []
        assert await store.list_persons(ADA.id) == []
    finally:
        await store.close()
