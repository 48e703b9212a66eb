"""SVG snapshots of the console (pytest-textual-snapshot): the transcript after each live
cognition rule and each panel, rendered from the real runtime with the scripted mind and the
harness's manual clock (so times are the same every run), the composer's cursor not blinking.

`uv run --frozen pytest tests/unit/console/test_console_snapshots.py --snapshot-update`
writes them anew after a deliberate change of the console's look."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from persyn.console import ConsoleApp, Operator
from persyn.core.clock import ManualClock
from persyn.runtime.api import RuntimeAPI
from persyn.testing import ADA, START, harness_settings, run_runtime
from persyn.testing import Pilot as RuntimePilot

from .kit import Mind, until

SIZE = (100, 30)
Setup = Callable[[RuntimePilot], Awaitable[None]]


def _app(tmp_path: Path, config: str = "", setup: Setup | None = None) -> ConsoleApp:
    """The console over a runtime that starts inside the app's own loop (as `persyn console`
    starts it) and stops when the app closes."""
    settings = harness_settings(tmp_path / "home", model="test:console", config=config)
    clock = ManualClock(START)
    stack = AsyncExitStack()

    async def started() -> RuntimeAPI:
        runtime = await stack.enter_async_context(run_runtime(settings, clock=clock, channels={}))
        if setup is not None:
            await setup(runtime)
        return runtime.runtime

    return ConsoleApp(
        started(),
        ADA,
        login="ops",
        model_label="test:console",
        operator=Operator(settings, ADA, clock.now),
        cursor_blink=False,
        on_close=stack.aclose,
    )


def _typed(text: str, done: Callable[[ConsoleApp], bool]) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await until(pilot, app.ready.is_set, "the console to connect")
        await pilot.press(*[key if key != " " else "space" for key in text], "enter")
        await until(pilot, lambda: done(app), "the turn to show")
        await pilot.pause()

    return run_before


def _has(text: str) -> Callable[[ConsoleApp], bool]:
    def check(app: ConsoleApp) -> bool:
        shown = [
            str(getattr(c, "content", "")) + str(getattr(c, "source", "")) for c in app.transcript.children
        ]
        return any(text in line for line in shown)

    return check


DELIBERATE = "[deliberation]\nsubstantive_min_words = 1\n"


@pytest.mark.parametrize(
    ("typed", "config", "shown"),
    [
        ("hello", "", "Nice to see you"),  # rule 1: the streamed draft became the reply
        ("please withdraw", DELIBERATE, "chose silence"),  # rule 2
        ("remember sailing?", DELIBERATE, "reconsidered"),  # rule 3: the surface cleared
        ("add two and two", "[deliberation]\nenabled = false\n", "**4**"),  # rule 4
    ],
    ids=["reply", "silence", "deferred", "tool"],
)
def test_the_transcript_after_each_rule(
    snap_compare: Any, tmp_path: Path, mind: Mind, typed: str, config: str, shown: str
) -> None:
    app = _app(tmp_path, config)
    assert snap_compare(app, run_before=_typed(typed, _has(shown)), terminal_size=SIZE)


async def _history(runtime: RuntimePilot) -> None:
    await runtime.say("Hello, I'm Sam.", speaker="sam", name="Sam")
    await runtime.say("Hi, Samuel here.", speaker="samuel", name="Samuel", channel="lobby")
    await runtime.settle()  # the background work (emotional-state readings) is metered before a panel shows


def _panel(key: str, ready: Callable[[ConsoleApp], bool]) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await until(pilot, app.ready.is_set, "the console to connect")
        await pilot.press(key)
        await until(pilot, lambda: ready(app), f"the panel behind {key}")
        await app.workers.wait_for_complete()  # nothing is still loading when it is taken
        await pilot.pause()
        await _painted(pilot)

    return run_before


async def _painted(pilot: Pilot[Any]) -> None:
    """Wait until every table on screen paints its header as wide as its rows: a table
    measures new rows when idle and repaints its header after, which a starved CI run
    snapshotted in between (the rows laid out, the header still at its labels' widths)."""
    app = pilot.app

    def headers_laid_out() -> bool:
        app.screen.refresh(layout=True)
        for table in app.screen.query(DataTable):
            if table.row_count == 0 or not table.region.area:  # empty or not on screen
                continue
            painted = table.render_line(0).text
            for column in table.ordered_columns:
                label = str(column.label)
                if f" {label}{' ' * (column.content_width - len(label))} " not in painted:
                    return False
        return True

    await until(pilot, headers_laid_out, "each table's header to be painted at its rows' widths")
    await pilot.pause()


def _static(selector: str, text: str) -> Callable[[ConsoleApp], bool]:
    return lambda app: text in str(app.query_one(selector).content)  # pyright: ignore[reportAttributeAccessIssue]


def _contacts_laid_out(app: ConsoleApp) -> bool:
    """The digest shown and the contacts table's columns sized to their rows: a table
    measures its new rows when idle, which a starved CI run once snapshotted before."""
    if not _static("#contact-digest", "recent conversations")(app):
        return False
    table = app.query_one("#contacts", DataTable)
    return table.row_count > 0 and table.ordered_columns[2].content_width >= len("2026-11-30 09:00")


@pytest.mark.parametrize(
    ("key", "ready"),
    [
        ("f2", _contacts_laid_out),
        ("f3", lambda app: len(app.query_one("#channel-conversations").children) > 0),
        ("f4", _static("#mind-view", "Heartbeat: next at")),
        ("f5", _static("#usage-view", "Burn rate")),
    ],
    ids=["directory", "channels", "mind", "usage"],
)
def test_each_panel(
    snap_compare: Any, tmp_path: Path, mind: Mind, key: str, ready: Callable[[ConsoleApp], bool]
) -> None:
    config = "[metering]\nevent_log = true\n"
    if key == "f5":  # the usage panel counts calls: no background emotion reading racing the snapshot
        config += "[emotion]\nenabled = false\n"
    app = _app(tmp_path, config, _history)
    assert snap_compare(app, run_before=_panel(key, ready), terminal_size=(120, 30))


async def _two_console_turns(runtime: RuntimePilot) -> None:
    where: dict[str, Any] = {"service": "terminal", "channel": "terminal", "speaker": "operator:ops"}
    await runtime.say("remember sailing?", **where)
    await runtime.settle()  # the deferred critics have been recorded
    await runtime.say("please withdraw", **where)
    await runtime.settle()


def test_the_mind_panel_with_an_older_turn_picked(snap_compare: Any, tmp_path: Path, mind: Mind) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await _panel("f4", _static("#turn-trace", "it was not mine to answer"))(pilot)
        await pilot.press("down")  # the older turn: its objection and decision
        picked = _static("#turn-trace", "false-premise")
        await until(pilot, lambda: picked(app), "the older turn's trace")
        await _painted(pilot)

    # One lens to draw from: the second critic is the same whatever the events' ids.
    app = _app(tmp_path, DELIBERATE + 'lenses = ["adversarial"]\n', _two_console_turns)
    assert snap_compare(app, run_before=run_before, terminal_size=(120, 34))
