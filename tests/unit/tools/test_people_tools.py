"""Quick facts and messaging a contact (SPEC §4.5, §4.6), called through the registry as the
model calls them, on a real SQLite store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from persyn.core.clock import ManualClock
from persyn.core.errors import ChannelError
from persyn.core.ids import new_id
from persyn.gateway.base import ToolCall
from persyn.store import Identity
from persyn.store.base import Person
from persyn.store.sqlite.store import SQLiteStore
from persyn.tools import ToolOutcome, ToolRegistry, ToolStatus
from persyn.tools.builtin.facts import MAX_FACTS, fact_tools
from persyn.tools.builtin.outreach import PREFERRED_CHANNEL, OutreachContext, outreach_tools
from persyn.tools.builtin.own import OwnToolsContext

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = new_id(T0)


class Caller:
    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry
        self.calls = 0

    async def call(self, name: str, **args: Any) -> ToolOutcome:
        self.calls += 1
        return await self.registry.call(ToolCall(id=f"call_{self.calls}", name=name, args=args))

    async def ok(self, name: str, **args: Any) -> dict[str, Any]:
        outcome = await self.call(name, **args)
        assert outcome.status is ToolStatus.OK, outcome.content
        result: dict[str, Any] = json.loads(outcome.content)
        return result

    async def fails(self, name: str, **args: Any) -> str:
        outcome = await self.call(name, **args)
        assert outcome.status is ToolStatus.FAILED, outcome.content
        return outcome.content


class Outbox:
    """The runtime's `send`, recording what it was asked to deliver."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []
        self.broken = False

    async def __call__(self, person_id: str, service: str, channel: str, text: str) -> str:
        if self.broken:
            raise ChannelError("the slack adapter is not connected")
        self.sent.append((person_id, service, channel, text))
        return f"delivered #{len(self.sent)}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    yield opened
    await opened.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


async def _person(store: SQLiteStore, name: str, service: str, channel: str, speaker: str) -> Person:
    return await store.resolve_person(
        AGENT, Identity(service=service, channel=channel, speaker_id=speaker), name, "human", T0
    )


@pytest.fixture
async def people(store: SQLiteStore) -> dict[str, Person]:
    return {
        "sam": await _person(store, "Sam Okafor", "slack", "D1", "U1"),
        "ann": await _person(store, "Ann", "slack", "D2", "U2"),
        "ann2": await _person(store, "ann", "matrix", "!room", "@ann:example.org"),
        "bo": await _person(store, "Bo", "irc", "#tea", "bo"),
    }


@pytest.fixture
def facts(store: SQLiteStore, clock: ManualClock) -> Caller:
    return Caller(ToolRegistry(fact_tools(OwnToolsContext(store=store, agent_id=AGENT, clock=clock), store)))


async def test_facts_about_people_and_myself(facts: Caller, people: dict[str, Person]) -> None:
    sam = people["sam"]
    noted = await facts.ok("set_fact", about="sam", key="timezone", value="Africa/Lagos")
    assert noted == {"subject_id": sam.id, "subject": "Sam Okafor", "facts": {"timezone": "Africa/Lagos"}}
    await facts.ok("set_fact", about=sam.id.lower(), key="  favourite   tea ", value=" oolong ")
    await facts.ok("set_fact", about="Sam Okafor", key="timezone", value="Europe/Lisbon")
    assert (await facts.ok("get_facts", about="SAM OKAFOR"))["facts"] == {
        "favourite tea": "oolong",
        "timezone": "Europe/Lisbon",
    }
    mine = await facts.ok("set_fact", about="me", key="name origin", value="Persian for 'person'")
    assert (mine["subject_id"], mine["subject"]) == (AGENT, "me")
    assert (await facts.ok("get_facts", about="Myself"))["facts"] == {"name origin": "Persian for 'person'"}
    assert (await facts.ok("get_facts", about=AGENT))["subject"] == "me"
    assert (await facts.ok("get_facts", about="bo"))["facts"] == {}  # a speaker id finds Bo too

    forgotten = await facts.ok("set_fact", about="sam", key="timezone")
    assert forgotten["facts"] == {"favourite tea": "oolong"}
    missing = await facts.fails("set_fact", about="sam", key="timezone")
    assert "there is no fact 'timezone' about Sam Okafor; get_facts shows the keys" in missing


async def test_names_that_do_not_pick_one_person(facts: Caller, people: dict[str, Person]) -> None:
    ambiguous = await facts.fails("get_facts", about="Ann")
    assert "2 contacts match 'Ann': " in ambiguous and "call again with the id" in ambiguous
    assert f"Ann ({people['ann'].id})" in ambiguous and f"ann ({people['ann2'].id})" in ambiguous
    assert (await facts.ok("get_facts", about=people["ann2"].id))["subject"] == "ann"
    assert (await facts.ok("get_facts", about="@ann:example.org"))["subject_id"] == people["ann2"].id

    unknown = await facts.fails("get_facts", about="Zed")
    assert "there is no contact named 'Zed'; your contacts include " in unknown
    assert "Sam Okafor (" in unknown
    no_id = await facts.fails("set_fact", about=new_id(T0), key="k", value="v")
    assert "there is no contact with id" in no_id
    blank = await facts.call("get_facts", about="")
    assert blank.status is ToolStatus.INVALID_ARGUMENTS


async def test_the_scratchpad_stays_small(
    facts: Caller, store: SQLiteStore, people: dict[str, Person]
) -> None:
    for n in range(MAX_FACTS):
        await store.set_fact(AGENT, people["bo"].id, f"k{n}", "v", T0)
    full = await facts.fails("set_fact", about="Bo", key="one more", value="v")
    assert f"Bo already has {MAX_FACTS} quick facts, the most kept" in full
    replaced = await facts.ok("set_fact", about="Bo", key="k1", value="w")  # replacing is fine
    assert replaced["facts"]["k1"] == "w"
    too_long = await facts.call("set_fact", about="Bo", key="k", value="x" * 501)
    assert too_long.status is ToolStatus.INVALID_ARGUMENTS


def _outreach(store: SQLiteStore, clock: ManualClock, outbox: Outbox, cap: int = 3) -> Caller:
    context = OutreachContext(store=store, agent_id=AGENT, clock=clock, send=outbox, max_messages=cap)
    return Caller(ToolRegistry(outreach_tools(context)))


async def test_messages_go_to_the_preferred_else_the_latest_channel(
    store: SQLiteStore, clock: ManualClock, people: dict[str, Person]
) -> None:
    outbox = Outbox()
    sam = people["sam"]
    await store.open_conversation(AGENT, "slack", "D1", [sam.id], T0, 1800)
    await store.open_conversation(
        AGENT, "slack", "general", [sam.id, people["bo"].id], T0 + timedelta(hours=1), 1800
    )
    await store.open_conversation(
        AGENT, "self", "reflection", [sam.id], T0 + timedelta(hours=2), 1800, kind="reflection"
    )
    tools = _outreach(store, clock, outbox, cap=5)

    sent = await tools.ok("message_contact", to="Sam", text="  How did the exam go?  ")
    assert sent == {
        "person_id": sam.id,
        "name": "Sam Okafor",
        "service": "slack",
        "channel": "general",
        "route": "most recent conversation",
        "delivery": "delivered #1",
        "sent_at": "2026-11-30T09:00:00+00:00",
        "remaining_this_turn": 4,
    }
    assert outbox.sent == [(sam.id, "slack", "general", "How did the exam go?")]

    await store.set_preference(AGENT, sam.id, PREFERRED_CHANNEL, "slack:D1")
    preferred = await tools.ok("message_contact", to=sam.id, text="Or tell me later.")
    assert (preferred["channel"], preferred["route"]) == ("D1", "preferred channel")

    # Never talked with Bo directly, but in #general: that is where he was last; Ann has
    # only her identity's channel.
    assert (await tools.ok("message_contact", to="bo", text="hi"))["channel"] == "general"
    only = await tools.ok("message_contact", to=people["ann"].id, text="hi")
    assert (only["service"], only["channel"], only["route"]) == ("slack", "D2", "only identity")


async def test_refusals_the_model_can_read(
    store: SQLiteStore, clock: ManualClock, people: dict[str, Person]
) -> None:
    outbox = Outbox()
    tools = _outreach(store, clock, outbox)
    assert "the message is empty" in await tools.fails("message_contact", to="Bo", text=" \n ")
    long = await tools.fails("message_contact", to="Bo", text="x" * 4001)
    assert "the message is 4001 characters, over the limit of 4000; shorten it" in long
    assert "2 contacts match 'ann'" in await tools.fails("message_contact", to="ann", text="hi")

    await store.attach_identity(
        AGENT, people["bo"].id, Identity(service="slack", channel="D9", speaker_id="U9")
    )
    stuck = await tools.fails("message_contact", to="Bo", text="hi")
    assert "several identities and no conversation to pick a channel from" in stuck

    outbox.broken = True
    broken = await tools.fails("message_contact", to="Sam Okafor", text="hi")
    assert f"could not deliver to Sam Okafor ({people['sam'].id}) on slack:D1: the slack adapter" in broken
    assert outbox.sent == []


async def test_at_most_a_few_messages_per_activation(
    store: SQLiteStore, clock: ManualClock, people: dict[str, Person]
) -> None:
    outbox = Outbox()
    tools = _outreach(store, clock, outbox, cap=2)
    for n in range(2):
        assert (await tools.ok("message_contact", to="Sam", text=f"ping {n}"))["remaining_this_turn"] == 1 - n
    tripped = await tools.fails("message_contact", to="Sam", text="ping 2")
    assert (
        "message cap reached: you have already sent 2 messages this turn (the most allowed is 2)" in tripped
    )
    assert len(outbox.sent) == 2
    # The next activation builds its tools afresh, with a fresh count.
    assert (await _outreach(store, clock, outbox, cap=2).ok("message_contact", to="Sam", text="hi"))[
        "delivery"
    ]
