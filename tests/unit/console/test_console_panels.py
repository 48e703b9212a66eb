"""The console's panels: the directory (bounded for a contact with 20,000 conversations,
curated through the CLI's operator functions, a merge checked in the store), the channels,
the mind and usage views, all switched to by keyboard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from textual.pilot import Pilot
from textual.widgets import DataTable, ListView, Static

from persyn.console import ConsoleApp, Operator
from persyn.console.panels import ConversationItem
from persyn.core.ids import new_id
from persyn.schedule import heartbeat_status
from persyn.store import schema
from persyn.testing import START, run_runtime
from persyn.testing import Pilot as RuntimePilot

from .kit import Mind, until

SEEDED = 20_000


@asynccontextmanager
async def console(
    tmp_path: Path, config: str = ""
) -> AsyncIterator[tuple[RuntimePilot, ConsoleApp, Pilot[Any]]]:
    async with run_runtime(tmp_path / "home", model="test:console", config=config) as runtime:
        await runtime.say("Hello, I'm Sam.", speaker="sam", name="Sam")
        await runtime.say("Hi, Samuel here.", speaker="samuel", name="Samuel", channel="lobby")
        app = ConsoleApp(
            runtime.runtime,
            runtime.agent,
            login="ops",
            model_label="test:console",
            operator=Operator(runtime.settings, runtime.agent, runtime.clock.now),
            cursor_blink=False,
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, app.ready.is_set, "the console to connect")
            yield runtime, app, pilot


def _seed_conversations(runtime: RuntimePilot, person_id: str, count: int) -> None:
    """`count` closed conversations with the person, older than what the runtime made,
    written in one transaction through the store's own schema (far quicker than `count`
    calls to `open_conversation`, and the same rows)."""
    engine = sa.create_engine(runtime.settings.database_url)
    agent_id = runtime.agent.id
    base = START - timedelta(days=400)
    conversations: list[dict[str, Any]] = []
    participants: list[dict[str, Any]] = []
    for n in range(count):
        started = base + timedelta(minutes=n)
        conversation_id = new_id(started)
        conversations.append(
            {
                "id": conversation_id,
                "agent_id": agent_id,
                "service": "test",
                "channel": "archive",
                "kind": "dialog",
                "participants": [person_id],
                "started_at": started,
                "last_activity_at": started,
                "closed_at": started + timedelta(seconds=30),
            }
        )
        participants.append(
            {
                "id": new_id(started),
                "agent_id": agent_id,
                "conversation_id": conversation_id,
                "person_id": person_id,
                "started_at": started,
            }
        )
    with engine.begin() as connection:
        connection.execute(schema.conversations.insert(), conversations)
        connection.execute(schema.conversation_participants.insert(), participants)
    engine.dispose()


async def _person(runtime: RuntimePilot, name: str) -> str:
    people = await runtime.store.list_persons(runtime.agent.id)
    return next(p.id for p in people if p.display_name == name)


def _rows(app: ConsoleApp) -> list[str]:
    table = app.query_one("#contacts", DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


async def _select(pilot: Pilot[Any], app: ConsoleApp, name: str) -> None:
    table = app.query_one("#contacts", DataTable)
    table.focus()
    await until(pilot, lambda: table.row_count > 0, "the contacts")
    await pilot.press("home")
    for _ in range(table.row_count):
        if str(table.get_row_at(table.cursor_row)[0]) == name:
            await until(pilot, lambda: _digest(app).startswith(name), f"{name}'s digest")
            return
        await pilot.press("down")
    raise AssertionError(f"no contact {name!r} in {_rows(app)}")


def _digest(app: ConsoleApp) -> str:
    return str(app.query_one("#contact-digest", Static).content)


async def test_a_contact_with_20000_conversations_shows_a_bounded_digest(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        sam = await _person(runtime, "Sam")
        _seed_conversations(runtime, sam, SEEDED)
        await pilot.press("f2")
        await _select(pilot, app, "Sam")
        listing = app.query_one("#contact-conversations", ListView)
        await until(pilot, lambda: len(listing.children) == 5, "the digest's conversations")
        items = [c for c in listing.children if isinstance(c, ConversationItem)]
        # The newest five: the runtime's own conversation first, then the latest seeded ones.
        assert items[0].conversation.channel == "room"
        assert [i.conversation.channel for i in items[1:]] == ["archive"] * 4
        assert items[1].conversation.started_at == START - timedelta(days=400) + timedelta(minutes=SEEDED - 1)
        assert "recent conversations (5):" in _digest(app)
        # Each opens to its full dialog.
        listing.focus()
        await pilot.press("enter")
        dialog = app.query_one("#contact-dialog", Static)
        await until(pilot, lambda: "Hello, I'm Sam." in str(dialog.content), "the dialog")
        assert "Ada: " in str(dialog.content)


async def test_a_merge_in_the_directory_panel_is_made_in_the_store(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        sam, samuel = await _person(runtime, "Sam"), await _person(runtime, "Samuel")
        await pilot.press("f2")
        await _select(pilot, app, "Sam")
        await pilot.click("#directory-command")
        for key in "merge Samuel --name Sam Smith":
            await pilot.press(key if key != " " else "space")
        await pilot.press("enter")
        result = app.query_one("#directory-panel .result", Static)
        await until(pilot, lambda: "now covers" in str(result.content), "the merge")
        people = {p.id: p for p in await runtime.store.list_persons(runtime.agent.id)}
        assert samuel not in people and people[sam].display_name == "Sam Smith"
        assert {(i.channel, i.speaker_id) for i in people[sam].identities} == {
            ("room", "sam"),
            ("lobby", "samuel"),
        }
        assert len(await runtime.store.person_conversations(runtime.agent.id, sam, 10)) == 2
        await until(
            pilot, lambda: "Sam Smith" in _rows(app) and "Samuel" not in _rows(app), "the list to show it"
        )
        # Curation that the CLI refuses is refused here too, and changes nothing.
        await pilot.click("#directory-command")
        for key in f"merge {sam}":  # by id: the selected contact itself
            await pilot.press(key if key != " " else "space")
        await pilot.press("enter")
        await until(pilot, lambda: "error:" in str(result.content), "the refusal")
        assert str(result.content) == "error: a contact cannot be merged into itself"
        # Rename, identities, preferred channel: the same operator functions.
        for command in (
            "rename Samantha",
            "attach slack general U123",
            "detach slack general U123",
            "prefer test:room",
        ):
            await pilot.click("#directory-command")
            for key in command:
                await pilot.press(key if key != " " else "space")
            await pilot.press("enter")
            await pilot.pause()
        await until(pilot, lambda: "reached first on test:room" in str(result.content), "the preference")
        person = await runtime.store.get_person(runtime.agent.id, sam)
        assert person is not None and person.display_name == "Samantha"
        assert ("general", "U123") not in {(i.channel, i.speaker_id) for i in person.identities}
        assert await runtime.store.get_preference(runtime.agent.id, sam, "preferred_channel") == "test:room"


async def test_channels_mind_and_usage_panels(tmp_path: Path, mind: Mind) -> None:
    config = "[metering]\nevent_log = true\n"
    async with console(tmp_path, config=config) as (runtime, app, pilot):
        await pilot.press("f3")
        listing = app.query_one("#channel-conversations", ListView)
        await until(pilot, lambda: len(listing.children) == 1, "the channel's conversations")
        table = app.query_one("#channel-list", DataTable)
        assert [str(table.get_row_at(i)[1]) for i in range(table.row_count)] == ["lobby", "room"]
        listing.focus()
        await pilot.press("enter")
        dialog = app.query_one("#channel-dialog", Static)
        await until(pilot, lambda: "Samuel here" in str(dialog.content), "the dialog")

        await pilot.press("f4")
        view = app.query_one("#mind-view", Static)
        await until(pilot, lambda: "Heartbeat: next at" in str(view.content), "the mind panel")
        app.query_one("#mind-panel").focus()
        await pilot.press("d")
        await until(pilot, lambda: "Heartbeat: deleted" in str(view.content), "the heartbeat deleted")
        assert await heartbeat_status(runtime.store, runtime.agent.id) is None  # in the store
        await pilot.press("r")
        await until(pilot, lambda: "Heartbeat: next at" in str(view.content), "the heartbeat restored")
        assert await heartbeat_status(runtime.store, runtime.agent.id) is not None

        await pilot.press("f5")
        usage = app.query_one("#usage-view", Static)
        await until(pilot, lambda: "Burn rate" in str(usage.content), "the usage panel")
        text = str(usage.content)
        assert "respond" in text and "test:console" in text
        await pilot.press("f1")
        assert app.focused is app.query_one("#composer")
