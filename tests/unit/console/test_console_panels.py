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
from persyn.console.panels import TURN_ROWS, ConversationItem
from persyn.core.ids import new_id
from persyn.present.render import trace_lines
from persyn.schedule import heartbeat_status
from persyn.store.schema import tables as schema
from persyn.testing import START, run_runtime
from persyn.testing import Pilot as RuntimePilot

from .kit import Mind, say, until

SEEDED = 20_000
DELIBERATE = "[deliberation]\nsubstantive_min_words = 1\n"  # every reply is weighed
ON_THE_CONSOLE: dict[str, Any] = {"service": "terminal", "channel": "terminal", "speaker": "operator:ops"}


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
    people = await runtime.full_store.list_persons(runtime.agent.id)
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
        people = {p.id: p for p in await runtime.full_store.list_persons(runtime.agent.id)}
        assert samuel not in people and people[sam].display_name == "Sam Smith"
        assert {(i.channel, i.speaker_id) for i in people[sam].identities} == {
            ("room", "sam"),
            ("lobby", "samuel"),
        }
        assert len(await runtime.full_store.person_conversations(runtime.agent.id, sam, 10)) == 2
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
        assert (
            await runtime.full_store.get_preference(runtime.agent.id, sam, "preferred_channel") == "test:room"
        )


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
        assert await heartbeat_status(runtime.full_store, runtime.agent.id) is None  # in the store
        await pilot.press("r")
        await until(pilot, lambda: "Heartbeat: next at" in str(view.content), "the heartbeat restored")
        assert await heartbeat_status(runtime.full_store, runtime.agent.id) is not None

        await pilot.press("f5")
        usage = app.query_one("#usage-view", Static)
        await until(pilot, lambda: "Burn rate" in str(usage.content), "the usage panel")
        text = str(usage.content)
        assert "respond" in text and "test:console" in text
        await pilot.press("f1")
        assert app.focused is app.query_one("#composer")


def _trace(app: ConsoleApp) -> str:
    return str(app.query_one("#turn-trace", Static).content)


def _turn_rows(app: ConsoleApp) -> list[list[str]]:
    table = app.query_one("#turns", DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def test_the_mind_panel_shows_the_deliberation_of_the_turn_picked(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path, config=DELIBERATE) as (runtime, app, pilot):
        older = await runtime.say("remember sailing?", **ON_THE_CONSOLE)
        await runtime.settle()  # its deferred critics have finished and been recorded
        latest = await runtime.say("please withdraw", transmitted=False, **ON_THE_CONSOLE)
        await runtime.settle()
        await pilot.press("f4")
        # The latest turn is picked first, as before: its own decision.
        await until(pilot, lambda: "it was not mine to answer" in _trace(app), "the latest turn's trace")
        assert app.focused is app.query_one("#turns")  # the picker has the keyboard
        rows = _turn_rows(app)
        assert [(r[2], r[3]) for r in rows] == [
            ("please withdraw", "silent"),
            ("remember sailing?", "replied"),
        ]
        assert "stayed silent" in _trace(app) and "false-premise" not in _trace(app)
        # An older turn, picked with the keyboard: its critics, objection and decision, not the latest's.
        await pilot.press("down")
        await until(pilot, lambda: "false-premise" in _trace(app), "the older turn's trace")
        shown = _trace(app)
        assert "it was not mine to answer" not in shown
        assert "replied: Yes, we sailed in May." in shown
        stored = await runtime.store.deliberation_traces(runtime.agent.id, [older.event.id])
        assert [line for line in trace_lines(stored[0].trace) if line not in shown] == []
        assert 'provenance: [false-premise] "we sailed in May" - there was no such trip' in shown
        # Back up: the latest again; and a reload (switching away and back) keeps the pick.
        await pilot.press("up")
        await until(pilot, lambda: "it was not mine to answer" in _trace(app), "the latest again")
        await pilot.press("down")
        await until(pilot, lambda: "false-premise" in _trace(app), "the older again")
        await pilot.press("f1", "f4")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "false-premise" in _trace(app)
        panel = app.query_one("#mind-panel")
        assert getattr(panel, "picked", None) == older.event.id != latest.event.id


def _seed_turns(runtime: RuntimePilot, count: int) -> list[str]:
    """`count` turns on the console's channel, each an input, a reply and a trace whose
    decision names the turn, written in one transaction through the store's own schema.
    Returns their event ids, oldest first."""
    engine = sa.create_engine(runtime.settings.database_url)
    agent_id = runtime.agent.id
    base = START - timedelta(days=30)
    conversation_id = new_id(base)
    rows: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []
    events: list[str] = []
    for n in range(count):
        at = base + timedelta(minutes=n)
        event_id = new_id(at)
        events.append(event_id)
        for role, name, text in (("user", "ops", f"question {n}"), ("agent", "Ada", f"answer {n}")):
            rows.append(
                {
                    "id": new_id(at),
                    "agent_id": agent_id,
                    "conversation_id": conversation_id,
                    "role": role,
                    "person_id": None,
                    "speaker_name": name,
                    "text": text,
                    "created_at": at,
                    "event_id": event_id,
                }
            )
        trace = {"mode": "inline", "decision": {"action": "speak", "reason": f"turn {n} was worth it"}}
        traces.append(
            {"id": new_id(at), "agent_id": agent_id, "event_id": event_id, "trace": trace, "updated_at": at}
        )
    conversation = {
        "id": conversation_id,
        "agent_id": agent_id,
        "service": "terminal",
        "channel": "terminal",
        "kind": "dialog",
        "participants": [],
        "started_at": base,
        "last_activity_at": base + timedelta(minutes=count),
        "closed_at": base + timedelta(minutes=count + 1),
    }
    with engine.begin() as connection:
        connection.execute(schema.conversations.insert(), [conversation])
        connection.execute(schema.messages.insert(), rows)
        connection.execute(schema.deliberation_traces.insert(), traces)
    engine.dispose()
    return events


async def test_the_turn_picker_is_bounded_for_a_channel_with_many_turns(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        count = 5_000
        _seed_turns(runtime, count)
        await pilot.press("f4")
        await until(pilot, lambda: f"turn {count - 1} was worth it" in _trace(app), "the newest turn")
        rows = _turn_rows(app)
        assert len(rows) == TURN_ROWS  # the latest few, however long the history
        assert [r[2] for r in rows[:2]] == [f"question {count - 1}", f"question {count - 2}"]
        await pilot.press("ctrl+end")  # the oldest listed
        oldest = count - TURN_ROWS
        await until(pilot, lambda: f"turn {oldest} was worth it" in _trace(app), "the oldest listed turn")
        assert f"question {oldest}" in _trace(app) and f"answer {oldest}" in _trace(app)
        await pilot.press("up", "up")
        await until(pilot, lambda: f"turn {oldest + 2} was worth it" in _trace(app), "two turns newer")


async def test_addresses_are_added_and_removed_in_the_directory_panel(tmp_path: Path, mind: Mind) -> None:
    async with console(tmp_path) as (runtime, app, pilot):
        sam = await _person(runtime, "Sam")
        await pilot.press("f2")
        await _select(pilot, app, "Sam")
        result = app.query_one("#directory-panel .result", Static)

        async def command(line: str, expect: str) -> str:
            await pilot.click("#directory-command")
            await say(pilot, line)
            await until(pilot, lambda: expect in str(result.content), f"the answer to {line!r}")
            return str(result.content)

        async def stored() -> set[tuple[str, str]]:
            return {(a.label, a.value) for a in await runtime.full_store.addresses(runtime.agent.id, sam)}

        await command("add-address Email sam@example.com", "Sam can be reached at email sam@example.com")
        assert await stored() == {("email", "sam@example.com")}
        await until(pilot, lambda: "address: email sam@example.com" in _digest(app), "the digest")
        await command("add-address email sam@example.com", "Sam already has email sam@example.com")
        await command("add-address phone +1 555 0100", "reached at phone +1 555 0100")
        assert await stored() == {("email", "sam@example.com"), ("phone", "+1 555 0100")}
        # Refused as the CLI refuses them, and nothing stored changes.
        text = await command("add-address e/mail x@example.com", "error:")
        assert "invalid address label 'e/mail'" in text
        text = await command("remove-address email other@example.com", "error:")
        assert "no email address 'other@example.com'" in text
        await command("add-address email", "error:")  # no value: the usage
        assert await stored() == {("email", "sam@example.com"), ("phone", "+1 555 0100")}
        await command("remove-address email sam@example.com", "Sam no longer has email sam@example.com")
        assert await stored() == {("phone", "+1 555 0100")}
        await until(pilot, lambda: "address: email" not in _digest(app), "the digest without it")
