"""The outbox in-process (issue 14): real SQLite files, real DBOS, model doubles. What the
agent sends is written before delivery and reaches a channel once — at once when it is
connected, on connecting when it was not, in the order written, retried when it fails."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.cognition.context import recalled_ids
from persyn.cognition.deliberation import Decision
from persyn.cognition.pipeline import Evidence, Prepared, Reply
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.errors import StoreError
from persyn.core.events import Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import Prompt
from persyn.runtime.app import Runtime
from persyn.runtime.channel import Channel
from persyn.runtime.compose import build_runtime
from persyn.runtime.delivery.outbox import Outbox, reply_key
from persyn.runtime.turn.models import AUTO_SPEAK, Draft, TransmitRequest
from persyn.store.sqlite.engine import sqlite_dbapi
from persyn.store.sqlite.store import SQLiteStore

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Surface(Channel):
    """A surface that records what it shows, or fails while `failing` is set."""

    service = "test"

    def __init__(self, agent_id: str | None = None) -> None:
        self.shown: list[Outbound] = []
        self.notices: list[Notice] = []
        self.failing = False
        self.agent_id = agent_id

    async def deliver(self, outbound: Outbound) -> None:
        if self.failing:
            raise ConnectionError("the surface is down")
        self.shown.append(outbound)

    async def notice(self, event: Event, notice: Notice) -> None:
        self.notices.append(notice)

    def serves(self, agent_id: str) -> bool:
        return self.agent_id is None or agent_id == self.agent_id


def _settings(home: Path, *agents: str) -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text('[models]\ndefault = "test:echo"\n[metering]\nevent_log = false\n')
    settings = load_settings(home, environ={})
    return settings.model_copy(update={"agents": [AgentConfig(name=n, id=new_id(START)) for n in agents]})


def _event(agent: AgentConfig, text: str, at: datetime) -> Event:
    return Event(
        id=new_id(at),
        agent_id=agent.id,
        service="test",
        channel="room",
        speaker=Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam"),
        text=text,
        received_at=at,
    )


def _outbound(agent_id: str, text: str) -> Outbound:
    return Outbound(
        event_id=new_id(START),
        agent_id=agent_id,
        service="test",
        channel="room",
        conversation_id=new_id(START),
        message_id=new_id(START),
        text=text,
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    try:
        yield opened
    finally:
        await opened.close()


async def test_what_waited_is_delivered_on_connecting_in_order_once_and_marked(store: SQLiteStore) -> None:
    clock = ManualClock(START)
    agent_id, other = new_id(START), new_id(START)
    connected: dict[str, Channel] = {}
    outbox = Outbox(store, clock, connected.get)
    for minute, text in ((1, "first"), (2, "second")):
        at = START + timedelta(minutes=minute)
        assert not await outbox.send(_outbound(agent_id, text), new_id(at), at)  # connected nowhere
    await outbox.send(_outbound(other, "for another agent"), new_id(START), START)

    surface = Surface(agent_id)
    connected["test"] = surface
    assert await outbox.attach(surface, [agent_id, other]) == 2
    assert [(o.text, o.while_away) for o in surface.shown] == [("first", True), ("second", True)]
    assert await store.pending_outbox(agent_id, "test") == []
    assert [r.text for r in await store.pending_outbox(other, "test")] == ["for another agent"]

    # Another process connecting later (a fresh channel) finds nothing left for it.
    later = Surface(agent_id)
    connected["test"] = later
    assert await outbox.attach(later, [agent_id]) == 0 and later.shown == []


async def test_a_failed_delivery_is_retried_and_the_rows_behind_it_wait(store: SQLiteStore) -> None:
    clock = ManualClock(START)
    agent_id = new_id(START)
    surface = Surface()
    surface.failing = True
    outbox = Outbox(store, clock, {"test": surface}.get)
    one, two = new_id(START), new_id(START + timedelta(seconds=1))
    assert not await outbox.send(_outbound(agent_id, "one"), one, START)
    assert not await outbox.send(_outbound(agent_id, "two"), two, START + timedelta(seconds=1))
    [first, _second] = await store.pending_outbox(agent_id, "test")
    assert (first.id, first.attempts, first.last_error) == (one, 2, "ConnectionError: the surface is down")

    surface.failing = False
    assert await outbox.poll(["test"], [agent_id]) == 2
    assert [o.text for o in surface.shown] == ["one", "two"]


async def test_a_replayed_write_is_the_same_row_and_a_channel_shows_an_id_once(store: SQLiteStore) -> None:
    clock = ManualClock(START)
    agent_id = new_id(START)
    surface = Surface()
    outbox = Outbox(store, clock, {"test": surface}.get)
    event_id = new_id(START)
    outbound = _outbound(agent_id, "hello")
    assert await outbox.send(outbound, reply_key(event_id), START)
    assert await outbox.send(outbound, reply_key(event_id), START)  # a replayed transmit step
    # A redelivery (two deliverers raced, or a crash before the mark): shown once.
    row = await store.get_outbox(agent_id, reply_key(event_id))
    assert row is not None
    again = outbound.model_copy(update={"outbox_id": row.id})
    assert await surface.deliver_outbound(again) is False
    assert [o.text for o in surface.shown] == ["hello"]


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    started = build_runtime(_settings(tmp_path / "home", "Ada", "Bo"), clock=ManualClock(START))
    await started.start(workers=True)
    try:
        yield started
    finally:
        await started.stop()


async def test_a_reply_in_the_connected_process_is_delivered_once(runtime: Runtime) -> None:
    surface = Surface()
    assert await runtime.attach_channel(surface) == 0
    agent = runtime.settings.agents[0]
    event = _event(agent, "Hi", START)
    await runtime.submit(event)
    marker = await runtime.wait_marker(agent.id, event.id, timeout=30)
    assert marker.transmitted
    assert await runtime.deliver_pending("test") == 0  # the poll finds nothing left to show
    assert [(o.text, o.while_away, o.outbox_id) for o in surface.shown] == [
        ("You said: Hi", False, reply_key(event.id))
    ]


async def test_a_reply_for_a_channel_connected_nowhere_waits_for_it(runtime: Runtime) -> None:
    agent = runtime.settings.agents[0]
    event = _event(agent, "Anyone there?", START)
    await runtime.submit(event)
    assert (await runtime.wait_marker(agent.id, event.id, timeout=30)).transmitted
    surface = Surface()
    assert await runtime.attach_channel(surface) == 1
    assert [(o.text, o.while_away) for o in surface.shown] == [("You said: Anyone there?", True)]
    runtime.detach_channel(surface)
    assert "test" not in runtime.channels


async def test_a_waiting_chat_is_given_a_reply_that_was_transmitted_without_it(runtime: Runtime) -> None:
    """As when `persyn run` took the chat's turn: the marker says transmitted, the channel
    saw nothing; `deliver_reply` shows it (live, not as missed), and only once."""
    agent = runtime.settings.agents[0]
    event = _event(agent, "Are you there?", START)
    await runtime.submit(event)
    assert (await runtime.wait_marker(agent.id, event.id, timeout=30)).transmitted
    surface = Surface()
    runtime.channels[surface.service] = surface  # connected after the turn, without a backlog pass
    assert await runtime.deliver_reply(agent.id, event.id)
    assert await runtime.deliver_reply(agent.id, event.id)
    assert [(o.text, o.while_away) for o in surface.shown] == [("You said: Are you there?", False)]
    assert not await runtime.deliver_reply(agent.id, new_id(START), timeout=0)  # no such reply


async def test_transmit_keeps_a_reminder_id_and_strips_a_recalled_records(runtime: Runtime) -> None:
    surface = Surface()
    await runtime.attach_channel(surface)
    agent = runtime.settings.agents[0]
    event = _event(agent, "Set it, please", START)
    await runtime.store.save_event(event)
    setup = await runtime.activation.receive(agent.id, event.id)
    reminder_id, record_id = new_id(START), new_id(START)
    text = f"Done: your reminder is {reminder_id}. You told me about the lake (ref {record_id})."
    prepared = Prepared(
        prompt=Prompt(system="You are Ada."),
        evidence=(Evidence(record_id=record_id, summary="the lake", score=0.9, band="strong"),),
    )
    draft = Draft(reply=Reply(text=text), prepared=prepared)
    outcome = TransmitRequest(draft=draft, text=text, decision=Decision(action="speak", reason=AUTO_SPEAK))
    result = await runtime.transmitter.transmit(agent.id, event.id, setup, outcome)
    said = f"Done: your reminder is {reminder_id}. You told me about the lake."
    assert result.text == said
    assert [o.text for o in surface.shown] == [said]
    # The record recalled for the turn is kept with the reply as surfaced in the conversation
    # (consolidation does not extract it again; later turns strip its id too).
    assert await recalled_ids(runtime.store, agent.id, setup.conversation_id) == [record_id]


async def test_a_recorded_reply_has_its_outbox_row_or_neither_is_stored(runtime: Runtime) -> None:
    """The reply, its marker and its outbox row commit together: a store that refuses the
    row (a real SQLite trigger) leaves no reply and no marker behind — the transmit step
    fails and is run again — never a reply recorded that no process will deliver."""
    surface = Surface()
    await runtime.attach_channel(surface)
    agent = runtime.settings.agents[0]
    event = _event(agent, "Hello?", START)
    await runtime.store.save_event(event)
    setup = await runtime.activation.receive(agent.id, event.id)
    draft = Draft(reply=Reply(text="Hello Sam"), prepared=None)
    outcome = TransmitRequest(
        draft=draft, text="Hello Sam", decision=Decision(action="speak", reason=AUTO_SPEAK)
    )
    assert isinstance(runtime.store, SQLiteStore)
    database = runtime.store.path
    dbapi = sqlite_dbapi()  # the store's own SQLite: the system library may not share its WAL
    with contextlib.closing(dbapi.connect(database)) as connection, connection:
        connection.execute(
            "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'outbox refused'); END"
        )
    with pytest.raises(StoreError, match="outbox refused"):
        await runtime.transmitter.transmit(agent.id, event.id, setup, outcome)
    assert await runtime.store.agent_reply_for_event(agent.id, event.id) is None
    assert await runtime.store.get_marker(agent.id, event.id, START) is None
    assert await runtime.store.get_outbox(agent.id, reply_key(event.id)) is None

    with contextlib.closing(dbapi.connect(database)) as connection, connection:
        connection.execute("DROP TRIGGER refuse_outbox")
    result = await runtime.transmitter.transmit(agent.id, event.id, setup, outcome)  # the step, retried
    row = await runtime.store.get_outbox(agent.id, reply_key(event.id))
    assert row is not None and row.message_id == result.message_id and row.delivered_at is not None
    assert [o.text for o in surface.shown] == ["Hello Sam"]
