"""The Matrix adapter against a real Synapse on loopback (SPEC §3, §4): invitations, rooms and
direct chats, threads and replies, Markdown, read receipts, a homeserver restart, a restart of
the adapter that resumes from its sync token, and `persyn run` killed mid-turn and restarted,
with nothing lost and nothing answered twice."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from irc_server import IrcServer
from matrix_server import SERVER_NAME, MatrixPerson, Synapse
from pydantic import SecretStr
from test_irc import ticking

from persyn.channels.matrix._messages import in_timeline_order
from persyn.channels.matrix.channel import MatrixChannel, render_html
from persyn.channels.matrix.config import MatrixConfig
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Secrets, Settings
from persyn.core.errors import ConfigError
from persyn.core.events import CompletionMarker, Event
from persyn.core.ids import new_id
from persyn.ops.doctor.channels import channel_checks
from persyn.ops.doctor.checks import Check
from persyn.runtime.channel import Link
from persyn.testing import models
from persyn.testing.harness import ADA as ADA_AGENT
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime
from persyn.testing.pacing import room_listener

ROOM_DOUBLE = "matrix-room"
AGENT_PASSWORD = "agent-secret"
ADA = f"@ada:{SERVER_NAME}"
SAM = f"@sam:{SERVER_NAME}"
BOB = AgentConfig(name="Bob", id=new_id(START + timedelta(milliseconds=1)))
PEOPLE = ("sam", "kim", "lee", "helper")
HUGE = "😀<&" * 5000  # 15,000 characters, 60 KB as UTF-8 before its HTML: more than one event holds


# Answers what it is asked, stays out of small talk, takes "privately" to Sam.
_room_double = room_listener(long_reply=HUGE, redirect_to=lambda draft: f"matrix:{SAM}")


@pytest.fixture(autouse=True)
def _doubles() -> Iterator[None]:
    models.register_double(ROOM_DOUBLE, _room_double, replace=True)
    yield
    models.unregister_double(ROOM_DOUBLE)


@pytest.fixture(scope="module")
def accounts(synapse: Synapse) -> Synapse:
    """The agents' and the people's accounts, made once (in parallel: each is a process)."""
    names = [("ada", AGENT_PASSWORD), ("bob", AGENT_PASSWORD)] + [(name, f"pw-{name}") for name in PEOPLE]
    made = [synapse.register_later(name, password) for name, password in names]
    made.append(synapse.register_later("admin", "pw-admin", admin=True))
    for process in made:
        _, error = process.communicate(timeout=120)
        assert process.returncode == 0, error
    return synapse


def _config(
    synapse: Synapse, extra: str = "", invites_from: str = '["@sam:test.local", "@lee:test.local"]'
) -> str:
    return (
        f'[channels.matrix]\nhomeserver = "{synapse.url}"\nuser_id = "@{{agent}}:{SERVER_NAME}"\n'
        f'invites_from = {invites_from}\nbots = ["@helper:test.local"]\n'
        "sync_timeout_seconds = 5\nreconnect_min_seconds = 0.05\nreconnect_max_seconds = 0.5\n"
        + extra
        + "[pacing]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )


def _channel(pilot: Pilot) -> MatrixChannel:
    settings = pilot.settings
    return MatrixChannel(
        settings.channels.section(MatrixConfig),
        {pilot.agent.id: pilot.agent},
        pilot.runtime,
        state_dir=settings.data_dir / "matrix",
        password=AGENT_PASSWORD,
        senses=settings.senses,
    )


@contextlib.asynccontextmanager
async def on_matrix(
    home: Path, synapse: Synapse, extra: str = "", **config: str
) -> AsyncIterator[tuple[Pilot, MatrixChannel]]:
    settings = harness_settings(home, model=f"test:{ROOM_DOUBLE}", config=_config(synapse, extra, **config))
    clock = ManualClock(START)
    async with run_runtime(settings, clock=clock) as pilot, ticking(clock):
        matrix = _channel(pilot)
        await matrix.start()
        try:
            await asyncio.wait_for(next(iter(matrix.accounts.values())).ready.wait(), 60)
            yield pilot, matrix
        finally:
            await matrix.stop()


@contextlib.asynccontextmanager
async def people(synapse: Synapse, *names: str) -> AsyncIterator[list[MatrixPerson]]:
    logged = [await MatrixPerson(synapse, name, f"pw-{name}").login() for name in names]
    try:
        yield logged
    finally:
        for person in logged:
            await person.close()


async def _joined(person: MatrixPerson, room: str, user: str = ADA) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while user not in await person.members(room):
        assert asyncio.get_running_loop().time() < deadline, f"{user} never joined {room}"
        await asyncio.sleep(0.05)


async def _events(pilot: Pilot) -> list[Event]:
    found: list[Event] = []
    for conversation in await pilot.full_store.list_conversations(pilot.agent.id, limit=50):
        for message in await pilot.store.recent_messages(pilot.agent.id, conversation.id, 50):
            if message.event_id and message.role.value == "user":
                event = await pilot.store.get_event(pilot.agent.id, message.event_id)
                if event is not None:
                    found.append(event)
    return sorted(found, key=lambda e: e.received_at)


# without a server ---------------------------------------------------------------------------------
def test_markdown_is_rendered_and_model_output_cannot_inject_markup() -> None:
    assert render_html("plain *words*") == "plain <em>words</em>"
    html = render_html("<script>alert(1)</script> [x](javascript:alert(1)) ![p](http://tracker/p.png)\n\n- a")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'href="javascript' not in html and "<img" not in html
    assert "<ul>" in html


def test_bad_matrix_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ftp://x"):
        harness_settings(tmp_path, config='[channels.matrix]\nhomeserver = "ftp://x"\n')
    with pytest.raises(ConfigError, match="lobby"):
        harness_settings(tmp_path, config='[channels.matrix]\nhomeserver = "http://x"\nrooms = ["lobby"]\n')
    with pytest.raises(ConfigError, match="sam"):
        harness_settings(
            tmp_path, config='[channels.matrix]\nhomeserver = "http://x"\ninvites_from = ["sam"]\n'
        )
    with pytest.raises(ConfigError, match="'friends'"):
        harness_settings(tmp_path, config='[channels.matrix]\nhomeserver = "http://x"\njoin = "friends"\n')
    assert MatrixConfig(user_id="@{agent}-bot:x.org").user_for("Ada Lovelace") == "@adalovelace-bot:x.org"


@given(
    st.lists(
        st.tuples(st.sampled_from(["!a:x", "!b:x", "!c:x"]), st.integers(min_value=0, max_value=5)),
        max_size=30,
    )
)
def test_a_batch_gets_arrival_times_rising_in_each_rooms_order(batch: list[tuple[str, int]]) -> None:
    """Whatever the clock said (ties, or a homeserver stamp going back), each room's events
    come out strictly rising in their order, none later than it was, and nothing else changes."""
    events = [
        (
            room,
            f"$e{n}",
            Event(
                id=new_id(START),
                agent_id=ADA_AGENT.id,
                service="matrix",
                channel=room,
                text=f"line {n}",
                received_at=START + timedelta(milliseconds=offset),
            ),
        )
        for n, (room, offset) in enumerate(batch)
    ]
    ordered = in_timeline_order(events)
    assert [(r, m, e.model_dump(exclude={"received_at"})) for r, m, e in ordered] == [
        (r, m, e.model_dump(exclude={"received_at"})) for r, m, e in events
    ]
    assert all(
        new.received_at <= old.received_at for (_, _, new), (_, _, old) in zip(ordered, events, strict=True)
    )
    for room in {r for r, _, _ in events}:
        stamps = [e.received_at for r, _, e in ordered if r == room]
        assert all(a < b for a, b in itertools.pairwise(stamps))


async def test_no_credentials_is_a_config_error(tmp_path: Path) -> None:
    async with run_runtime(
        tmp_path / "home", config='[channels.matrix]\nhomeserver = "http://127.0.0.1:9"\n'
    ) as pilot:
        with pytest.raises(ConfigError, match="MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD"):
            MatrixChannel(
                pilot.settings.channels.section(MatrixConfig),
                {pilot.agent.id: pilot.agent},
                pilot.runtime,
                state_dir=tmp_path,
            )


# against Synapse -----------------------------------------------------------------------------------
async def test_rooms_threads_direct_chats_and_invitations(tmp_path: Path, accounts: Synapse) -> None:
    """Invited by someone allowed, the agent joins; it keeps out of small talk (saying why),
    answers a mention in the message's thread and a direct chat as a reply, with Markdown as
    escaped HTML, marks what it processed read, and declines a stranger's invitation."""
    async with (
        people(accounts, "sam", "kim", "lee", "helper") as (sam, kim, lee, helper),
        on_matrix(tmp_path / "home", accounts) as (pilot, _matrix),
    ):
        room = await sam.create_room(kim.user_id, helper.user_id)
        await kim.join(room)
        await helper.join(room)
        await sam.say(room, "Ada, this was said before you came")  # history: not said to the agent
        await sam.invite(room, ADA)
        await _joined(sam, room)
        await sam.say(room, "the weather is lovely today")
        await kim.say(room, "yes, sunny all week")
        await helper.say(room, "beep: 3 new builds")
        await pilot.wait_for(lambda: _silent(pilot, 3), "three silent turns")
        asked = await sam.say(room, "Ada, what did kim say about the week?")
        await sam.wait_for(lambda: bool(sam.said_by(ADA, room)), "the answer in the room")
        reply = sam.said_by(ADA, room)[0]
        assert reply.body == "You said: Ada, what did kim say about the week?"
        assert reply.content["m.relates_to"] == {
            "rel_type": "m.thread",
            "event_id": asked,
            "is_falling_back": False,
            "m.in_reply_to": {"event_id": asked},
        }
        assert reply.content["m.mentions"] == {"user_ids": [sam.user_id]}
        await sam.wait_for(lambda: (room, asked, ADA) in sam.receipts, "the agent's read receipt")

        direct = await lee.create_room(ADA, direct=True)
        await _joined(lee, direct)
        said = await lee.say(direct, "show me *this* <b>raw</b> & [that](javascript:alert(1))")
        await lee.wait_for(lambda: bool(lee.said_by(ADA, direct)), "the direct answer")
        answer = lee.said_by(ADA, direct)[0]
        assert answer.content["m.relates_to"] == {"m.in_reply_to": {"event_id": said}}
        assert answer.content["format"] == "org.matrix.custom.html"
        assert answer.body == "You said: show me *this* <b>raw</b> & [that](javascript:alert(1))"
        formatted = answer.content["formatted_body"]
        assert formatted.startswith("You said: show me <em>this</em> &lt;b&gt;raw&lt;/b&gt; &amp; ")
        assert "<a " not in formatted

        refused = await kim.create_room(ADA)
        await _left(kim, refused, ADA)

        await pilot.settle()
        events = await _events(pilot)
        chatter = [e for e in events if e.text in ("the weather is lovely today", "yes, sunny all week")]
        markers = [await _marker(pilot, e) for e in chatter]
        assert [m.transmitted for m in markers if m] == [False, False]
        assert all("others are chatting" in (m.reason or "") for m in markers if m)
        said_there = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "matrix", room, 10)]
        # Every overheard line is in the room's dialog, in the room's order.
        assert said_there[:3] == ["the weather is lovely today", "yes, sunny all week", "beep: 3 new builds"]
        kinds = {p.display_name: p.kind for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert kinds["helper"] == "agent" and kinds["sam"] == kinds["kim"] == kinds["lee"] == "human"
        assert len(sam.said_by(ADA)) == 1 and len(lee.said_by(ADA)) == 1
        assert not any("before you came" in e.text for e in events)


async def test_redirect_to_a_direct_chat_and_a_reply_too_big_for_one_event(
    tmp_path: Path, accounts: Synapse
) -> None:
    """The decision moves an answer to the asker's direct chat: the agent opens one (the outbox
    row names the user); a reply bigger than a Matrix event arrives whole, in pieces."""
    async with (
        people(accounts, "sam", "kim") as (sam, kim),
        on_matrix(tmp_path / "home", accounts) as (pilot, _matrix),
    ):
        room = await sam.create_room(ADA, kim.user_id)  # kim joins: a room, not a private chat
        await _joined(sam, room)
        await _joined(sam, room, kim.user_id)
        await sam.say(
            room,
            "Ada, privately please: what is the plan for the garden and the shed this spring and summer?",
        )
        await sam.wait_for(lambda: any(s.room != room for s in sam.said_by(ADA)), "the answer elsewhere")
        private = next(s for s in sam.said_by(ADA) if s.room != room)
        assert (
            private.body
            == "You said: Ada, privately please: what is the plan for the garden and the shed this spring and summer?"
        )
        assert await sam.members(private.room) == {ADA, SAM}
        await sam.say(private.room, "now tell me everything")
        await sam.wait_for(
            lambda: "".join(s.body for s in sam.said_by(ADA, private.room)[1:]) == HUGE, "it all"
        )
        pieces = sam.said_by(ADA, private.room)[1:]
        assert len(pieces) == 3 and "<" not in "".join(p.content["formatted_body"] for p in pieces)
        await pilot.settle()
        assert sam.said_by(ADA, room) == [] and kim.said_by(ADA) == []
        assert await pilot.store.pending_outbox(pilot.agent.id, "matrix") == []


async def test_the_deployments_other_agent_is_a_contact_of_kind_agent(
    tmp_path: Path, accounts: Synapse
) -> None:
    """Two agents of one deployment in a room, each on its own account: what one says reaches the
    other as said by an agent; the person who spoke is a human to both."""
    settings = harness_settings(tmp_path / "home", model=f"test:{ROOM_DOUBLE}", config=_config(accounts))
    settings = settings.model_copy(update={"agents": [ADA_AGENT, BOB]})
    clock = ManualClock(START)
    async with people(accounts, "sam") as (sam,), run_runtime(settings, clock=clock) as pilot, ticking(clock):
        matrix = MatrixChannel(
            settings.channels.section(MatrixConfig),
            {a.id: a for a in settings.agents},
            pilot.runtime,
            state_dir=settings.data_dir / "matrix",
            password=AGENT_PASSWORD,
        )
        await matrix.start()
        try:
            bob = f"@bob:{SERVER_NAME}"
            room = await sam.create_room(ADA, bob)
            await _joined(sam, room)
            await _joined(sam, room, bob)
            await sam.say(room, "Ada, how are you today?")
            await sam.wait_for(lambda: bool(sam.said_by(ADA, room)), "Ada's answer")

            async def bob_has_met_both() -> bool:  # Bob hears Ada's answer on his own next sync
                return len(await pilot.full_store.list_persons(BOB.id)) >= 2

            await pilot.wait_for(bob_has_met_both, "Bob's directory to hold Ada and sam")
            await pilot.settle()
            kinds = {p.display_name: p.kind for p in await pilot.full_store.list_persons(BOB.id)}
            assert kinds == {"Ada": "agent", "sam": "human"}
            assert sam.said_by(bob) == []  # nothing was said to Bob
        finally:
            await matrix.stop()


async def test_an_access_token_serves_its_own_user_only(
    tmp_path: Path, accounts: Synapse, caplog: pytest.LogCaptureFixture
) -> None:
    """MATRIX_ACCESS_TOKEN instead of a password: someone else's token is refused with the two
    user ids named (the agent never syncs as them); the agent's own token serves."""
    settings = harness_settings(tmp_path / "home", model=f"test:{ROOM_DOUBLE}", config=_config(accounts))
    async with (
        people(accounts, "sam") as (sam,),
        run_runtime(settings, clock=ManualClock(START)) as pilot,
    ):
        ada = await MatrixPerson(accounts, "ada", AGENT_PASSWORD).login()
        await ada.close()  # only its token is wanted

        def by_token(token: str) -> MatrixChannel:
            return MatrixChannel(
                settings.channels.section(MatrixConfig),
                {pilot.agent.id: pilot.agent},
                pilot.runtime,
                state_dir=settings.data_dir / "matrix",
                access_token=token,
            )

        theirs = by_token(sam.token)
        await theirs.start()
        try:
            await sam.wait_for(lambda: "belongs to '@sam:test.local'" in caplog.text, "the refusal")
            account = next(iter(theirs.accounts.values()))
            assert account.syncs == 0 and not account.ready.is_set()
        finally:
            await theirs.stop()
        own = by_token(ada.token)
        await own.start()
        try:
            await asyncio.wait_for(next(iter(own.accounts.values())).ready.wait(), 60)
            direct = await sam.create_room(ADA, direct=True)
            await _joined(sam, direct)
            await sam.say(direct, "hello by token")
            await sam.wait_for(lambda: len(sam.said_by(ADA, direct)) == 1, "the answer")
            await pilot.settle()
        finally:
            await own.stop()
        assert [s.body for s in sam.said_by(ADA)] == ["You said: hello by token"]


async def _marker(pilot: Pilot, event: Event) -> CompletionMarker | None:
    """The event's completion marker, read as of the test's start: the ticking clock runs
    hours of its time per second under load, and a marker lives one hour of it."""
    return await pilot.store.get_marker(pilot.agent.id, event.id, START)


async def _silent(pilot: Pilot, count: int) -> bool:
    events = await _events(pilot)
    done = [await _marker(pilot, e) for e in events]
    return sum(1 for m in done if m is not None and not m.transmitted) >= count


async def _left(person: MatrixPerson, room: str, user: str) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while await person.membership(room, user) != "leave":
        assert asyncio.get_running_loop().time() < deadline, f"{user} never declined {room}"
        await asyncio.sleep(0.05)


async def test_one_sync_batch_is_stored_in_the_rooms_order(tmp_path: Path, accounts: Synapse) -> None:
    """Two people and a bot talk while the adapter is down: on its return the lines come in
    one sync batch, their turns finish in any order, and the room's dialog still has them in
    the order they were said."""
    lines = [
        ("sam", "did anyone water the plants?"),
        ("kim", "I did, on Monday"),
        ("helper", "beep: reminder set for Friday"),
        ("sam", "thanks kim"),
        ("kim", "no problem"),
        ("helper", "beep: 2 open tasks"),
    ]
    async with (
        people(accounts, "sam", "kim", "helper") as (sam, kim, helper),
        on_matrix(tmp_path / "home", accounts) as (pilot, matrix),
    ):
        room = await sam.create_room(ADA, kim.user_id, helper.user_id)
        await kim.join(room)
        await helper.join(room)
        await _joined(sam, room)
        await matrix.stop()
        speakers = {"sam": sam, "kim": kim, "helper": helper}
        for name, text in lines:
            await speakers[name].say(room, text)
        again = _channel(pilot)
        await again.start()
        try:
            await pilot.wait_for(lambda: _silent(pilot, len(lines)), "a silent turn for every line")
            await pilot.settle()
        finally:
            await again.stop()
        account = next(iter(again.accounts.values()))
        assert account.syncs >= 1
        said_there = await pilot.store.channel_messages(pilot.agent.id, "matrix", room, 20)
        assert [(m.speaker_name, m.text) for m in said_there] == lines
        assert sam.said_by(ADA) == []


async def test_join_contacts_accepts_a_known_contacts_invitation_only(
    tmp_path: Path, accounts: Synapse
) -> None:
    """`join = "contacts"`: kim, not on the allowlist, is met in a room sam (on it) invited the
    agent to; kim's own invitation is then accepted. lee, never met, is declined."""
    async with (
        people(accounts, "sam", "kim", "lee") as (sam, kim, lee),
        on_matrix(tmp_path / "home", accounts, 'join = "contacts"\n', invites_from='["@sam:test.local"]') as (
            pilot,
            _matrix,
        ),
    ):
        stranger = await lee.create_room(ADA)
        await _left(lee, stranger, ADA)  # never met: declined
        early = await kim.create_room(ADA)
        await _left(kim, early, ADA)  # not yet a contact: declined too
        room = await sam.create_room(ADA, kim.user_id)
        await _joined(sam, room)
        await _joined(sam, room, kim.user_id)
        await kim.say(room, "hello everyone, nice weather")
        await pilot.wait_for(lambda: _silent(pilot, 1), "kim's line taken in")
        await pilot.settle()
        assert "kim" in {p.display_name for p in await pilot.full_store.list_persons(pilot.agent.id)}
        invited = await kim.create_room(ADA)
        await _joined(kim, invited)
        await kim.say(invited, "Ada, thanks for coming")
        await kim.wait_for(lambda: bool(kim.said_by(ADA, invited)), "the answer in kim's room")
        assert await lee.membership(stranger, ADA) == "leave"
        assert kim.said_by(ADA, early) == []


async def test_rate_limited_sends_are_waited_out_and_delivered_once(
    tmp_path: Path, accounts: Synapse
) -> None:
    """Synapse limits the agent to one message a second (its admin API): a reply in three
    pieces meets 429s (M_LIMIT_EXCEEDED with retry_after_ms); each is waited out, every piece
    arrives once and in order, and the outbox is empty."""
    async with (
        people(accounts, "sam", "admin") as (sam, admin),
        on_matrix(tmp_path / "home", accounts) as (pilot, matrix),
    ):
        account = next(iter(matrix.accounts.values()))
        direct = await sam.create_room(ADA, direct=True)
        await _joined(sam, direct)
        await admin.limit_messages(ADA, per_second=1, burst=1)
        try:
            await sam.say(direct, "now tell me everything")
            await sam.wait_for(lambda: "".join(s.body for s in sam.said_by(ADA, direct)) == HUGE, "it all")
            await pilot.settle()
        finally:
            await admin.limit_messages(ADA, per_second=0, burst=0)  # 0: no limit for the agent
        pieces = sam.said_by(ADA, direct)
        assert len(pieces) == 3
        assert account.rate_limited >= 1
        assert await pilot.store.pending_outbox(pilot.agent.id, "matrix") == []


async def test_homeserver_restart_loses_and_doubles_nothing(tmp_path: Path, accounts: Synapse) -> None:
    """The homeserver dies mid-conversation. What the agent says meanwhile waits in the outbox;
    the adapter syncs again with backoff and delivers it exactly once; the conversation goes on."""
    async with people(accounts, "sam") as (sam,), on_matrix(tmp_path / "home", accounts) as (pilot, matrix):
        account = next(iter(matrix.accounts.values()))
        direct = await sam.create_room(ADA, direct=True)
        await _joined(sam, direct)
        await sam.say(direct, "remember me")
        await sam.wait_for(lambda: len(sam.said_by(ADA, direct)) == 1, "the first answer")
        await pilot.settle()
        first = (await _events(pilot))[-1]
        person = next(
            p for p in await pilot.full_store.list_persons(pilot.agent.id) if p.display_name == "sam"
        )
        connections = account.connections

        async def not_ready() -> bool:
            return not account.ready.is_set()

        def matrix_link() -> Link:
            (state,) = [s for s in pilot.runtime.channel_states() if s.service == "matrix"]
            return state.link

        assert matrix_link() is Link.CONNECTED
        accounts.stop()
        try:
            await pilot.wait_for(not_ready, "the adapter to notice")

            async def down() -> bool:
                return matrix_link() in (Link.RECONNECTING, Link.FAILING)

            await pilot.wait_for(down, "the link to show the homeserver gone")
            status = await pilot.runtime.outreach.send_to_contact(
                pilot.agent.id, first.id, person.id, "matrix", direct, "while you were away"
            )
            assert "retried" in status or "not connected" in status or "delivered" in status
        finally:
            accounts.start()
        await sam.wait_for(
            lambda: any(s.body == "while you were away" for s in sam.said_by(ADA)), "the held message"
        )
        assert account.connections > connections
        assert matrix_link() is Link.CONNECTED
        await sam.say(direct, "still there?")
        await sam.wait_for(
            lambda: any("still there" in s.body for s in sam.said_by(ADA)), "an answer after it"
        )
        await pilot.settle()
        bodies = [s.body for s in sam.said_by(ADA, direct)]
        assert bodies == ["You said: remember me", "while you were away", "You said: still there?"]
        assert await pilot.store.pending_outbox(pilot.agent.id, "matrix") == []


async def test_restarted_adapter_resumes_from_its_sync_token(tmp_path: Path, accounts: Synapse) -> None:
    """Stopped and started again, the adapter answers every message said meanwhile — more than
    one sync's timeline holds, so the gap is fetched — once, and nothing from before again."""
    async with (
        people(accounts, "lee") as (lee,),
        on_matrix(tmp_path / "home", accounts, extra="timeline_limit = 2\n") as (pilot, matrix),
    ):
        direct = await lee.create_room(ADA, direct=True)
        await _joined(lee, direct)
        await lee.say(direct, "before")
        await lee.wait_for(lambda: len(lee.said_by(ADA, direct)) == 1, "the first answer")
        await pilot.settle()
        await matrix.stop()
        state = json.loads(next((pilot.settings.data_dir / "matrix").glob("*.json")).read_text())
        assert state["next_batch"]
        for n in range(1, 6):
            await lee.say(direct, f"meanwhile {n}")
        again = _channel(pilot)
        await again.start()
        try:
            await lee.wait_for(lambda: len(lee.said_by(ADA, direct)) == 6, "five more answers")
            await pilot.settle()
            await lee.say(direct, "and now")
            await lee.wait_for(lambda: len(lee.said_by(ADA, direct)) == 7, "the last answer")
            await pilot.settle()
        finally:
            await again.stop()
        # A first start (no state yet) takes the current position: no history is answered.
        fresh = MatrixChannel(
            pilot.settings.channels.section(MatrixConfig),
            {pilot.agent.id: pilot.agent},
            pilot.runtime,
            state_dir=tmp_path / "fresh",
            password=AGENT_PASSWORD,
        )
        await fresh.start()
        try:
            await asyncio.wait_for(next(iter(fresh.accounts.values())).ready.wait(), 60)
            await lee.say(direct, "first start")
            await lee.wait_for(lambda: len(lee.said_by(ADA, direct)) == 8, "the answer to what is new")
            await pilot.settle()
        finally:
            await fresh.stop()
        bodies = [s.body for s in lee.said_by(ADA, direct)]
        expected = ["before", *(f"meanwhile {n}" for n in range(1, 6)), "and now", "first start"]
        assert bodies == [f"You said: {text}" for text in expected]


async def test_a_first_start_soon_after_another_answers_no_history(tmp_path: Path, accounts: Synapse) -> None:
    """Two first starts of one account within Synapse's two-minute /sync response cache: the
    second must not be handed the first one's position (and with it, as new, what was said in
    between)."""
    async with (
        people(accounts, "lee") as (lee,),
        on_matrix(tmp_path / "home", accounts) as (pilot, matrix),
    ):
        direct = await lee.create_room(ADA, direct=True)
        await _joined(lee, direct)
        await matrix.stop()
        await lee.say(direct, "said while nobody listened")
        fresh = MatrixChannel(
            pilot.settings.channels.section(MatrixConfig),
            {pilot.agent.id: pilot.agent},
            pilot.runtime,
            state_dir=tmp_path / "fresh",
            password=AGENT_PASSWORD,
        )
        await fresh.start()
        try:
            await asyncio.wait_for(next(iter(fresh.accounts.values())).ready.wait(), 60)
            await lee.say(direct, "hello again")
            await lee.wait_for(lambda: len(lee.said_by(ADA, direct)) == 1, "the answer to what is new")
            await pilot.settle()
        finally:
            await fresh.stop()
        assert [s.body for s in lee.said_by(ADA, direct)] == ["You said: hello again"]
        assert [e.text for e in await _events(pilot)] == ["hello again"]


# `persyn run`, killed mid-turn -------------------------------------------------------------------------
def _persyn(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "persyn", "--home", str(home), *args]


def _environ(model: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MATRIX_ACCESS_TOKEN"):
        base.pop(key, None)
    return {**base, "PERSYN_MODELS__DEFAULT": model, "MATRIX_PASSWORD": AGENT_PASSWORD}


def _run(home: Path, model: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            _persyn(home, "run"),
            env=_environ(model),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _init_home(home: Path, homeserver: str, model: str) -> None:
    """`persyn init`, then the Matrix keys set in the starter file (it has every section's header)."""
    done = subprocess.run(
        _persyn(home, "init", "--name", "Ada"), env=_environ(model), capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    config = home / "persyn.toml"
    text = config.read_text()
    assert "\n[channels.matrix]\n" in text
    matrix = (
        f'homeserver = "{homeserver}"\nuser_id = "@{{agent}}:{SERVER_NAME}"\nreconnect_min_seconds = 0.1\n'
    )
    pacing = (
        "[pacing.channels.matrix]\nlisten_seconds = 0.2\nmin_interval_seconds = 0.0\njitter_seconds = 0.1\n"
    )
    config.write_text(
        text.replace("\n[channels.matrix]\n", f"\n[channels.matrix]\n{matrix}", 1) + "\n" + pacing
    )


@pytest.mark.e2e
async def test_persyn_run_killed_mid_turn_answers_once_after_restart(
    tmp_path: Path, accounts: Synapse
) -> None:
    """`persyn run` serves Matrix; killed (-9) while its model is still answering, then started
    again: the interrupted turn is answered once, what was said while it was down is answered
    once, and nothing is answered twice."""
    home = tmp_path / "home"
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps([{"task": "respond", "match": "slowly", "sleep_ms": 3000, "reply": "a slow answer"}])
    )
    model = f"test:script@{rules}"
    _init_home(home, accounts.url, model)
    log = tmp_path / "run.log"
    daemon = _run(home, model, log)
    async with people(accounts, "kim") as (kim,):
        try:
            direct = await kim.create_room(ADA, direct=True)
            await _joined(kim, direct)
            slow = await kim.say(direct, "answer me slowly")
            await kim.wait_for(lambda: (direct, slow, ADA) in kim.receipts, "the agent taking the message")
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=60)
            assert kim.said_by(ADA) == []  # killed before it answered
            await kim.say(direct, "and this while you were down")
            daemon = _run(home, model, log)
            await kim.wait_for(lambda: len(kim.said_by(ADA, direct)) == 2, "both answers")
            await kim.say(direct, "one more")
            await kim.wait_for(lambda: len(kim.said_by(ADA, direct)) == 3, "the last answer")
        finally:
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(timeout=60)
        bodies = sorted(s.body for s in kim.said_by(ADA, direct))
    output = log.read_text(errors="replace")
    assert code == 0, output
    assert bodies == sorted(
        ["a slow answer", "You said: and this while you were down", "You said: one more"]
    ), output


# persyn doctor --------------------------------------------------------------------------------------
async def test_doctor_reports_each_chat_channel(tmp_path: Path, accounts: Synapse, ircd: IrcServer) -> None:
    """Each configured network: credentials present, server answering, the token's owner; a
    server that is down or a refused token is a failure with its fix, found within seconds."""

    def settings(irc_port: int, homeserver: str, **secrets: str) -> Settings:
        config = (
            f'[channels.irc]\nserver = "127.0.0.1"\nport = {irc_port}\ntls = false\nchannels = ["#lab"]\n'
            '[channels.telegram]\nenabled = true\napi_url = "http://127.0.0.1:9"\n'
            f'[channels.matrix]\nhomeserver = "{homeserver}"\nuser_id = "@{{agent}}:{SERVER_NAME}"\n'
        )
        base = harness_settings(tmp_path / "home", config=config)
        return base.model_copy(
            update={"secrets": Secrets(channels={k: SecretStr(v) for k, v in secrets.items()})}
        )

    def lines(checks: list[Check]) -> dict[str, tuple[bool, str]]:
        return {c.name: (c.ok, c.detail) for c in checks}

    bare = lines(await channel_checks(settings(ircd.port, accounts.url)))
    assert bare["irc"] == (True, f"127.0.0.1:{ircd.port} answers; no password; rooms #lab")
    assert bare["telegram"] == (False, "enabled but TELEGRAM_BOT_TOKEN is not set")
    assert (
        bare["matrix"][0] is False and "neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD" in bare["matrix"][1]
    )

    async with people(accounts, "sam") as (sam,):
        ada = await MatrixPerson(accounts, "ada", AGENT_PASSWORD).login()
        try:
            good = lines(
                await channel_checks(
                    settings(ircd.port, accounts.url, telegram_bot_token="1:x", matrix_access_token=ada.token)
                )
            )
            theirs = lines(
                await channel_checks(settings(ircd.port, accounts.url, matrix_access_token=sam.token))
            )
        finally:
            await ada.close()
    assert good["matrix"] == (True, f"{accounts.url} answers; MATRIX_ACCESS_TOKEN is {ADA}")
    assert good["telegram"][0] is False and "does not answer" in good["telegram"][1]
    assert theirs["matrix"] == (
        False,
        f"MATRIX_ACCESS_TOKEN is '@sam:test.local''s, but [channels.matrix] user_id is '{ADA}'",
    )
    refused = lines(await channel_checks(settings(ircd.port, accounts.url, matrix_access_token="nope")))
    assert refused["matrix"] == (False, f"{accounts.url} refused MATRIX_ACCESS_TOKEN (HTTP 401)")
    down = lines(await channel_checks(settings(9, "http://127.0.0.1:9", matrix_password="x")))
    assert down["irc"][0] is False and "does not answer" in down["irc"][1]
    assert down["matrix"][0] is False and "does not answer" in down["matrix"][1]
    none = lines(await channel_checks(harness_settings(tmp_path / "other")))
    assert list(none) == ["chat channels"] and none["chat channels"][0] is True
