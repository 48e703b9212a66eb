"""The IRC adapter against a real ngircd on loopback (SPEC §3, §4): rooms and private
messages, addressed and overheard traffic, long replies, nick collisions, kicks, and a
server restart with no lost or doubled message."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from irc_server import IrcPeer, IrcServer

from persyn.channels.irc.channel import IrcChannel, parse_line, split_text
from persyn.channels.irc.config import IrcConfig
from persyn.core.clock import ManualClock
from persyn.core.errors import ConfigError
from persyn.core.events import Event
from persyn.runtime.channel import Link
from persyn.testing import models
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime
from persyn.testing.pacing import room_listener, ticking

ROOM_DOUBLE = "irc-room"
LONG_REPLY = " ".join(f"word{n}" for n in range(180))  # ~1,200 bytes: three IRC lines at least


# Answers what it is asked, stays out of small talk, takes "privately" to lee or sam.
_room_double = room_listener(
    long_reply=LONG_REPLY, redirect_to=lambda draft: "irc:lee" if "lee" in draft else "irc:sam"
)


@pytest.fixture(autouse=True)
def _doubles() -> Iterator[None]:
    models.register_double(ROOM_DOUBLE, _room_double, replace=True)
    yield
    models.unregister_double(ROOM_DOUBLE)


def _config(port: int, rooms: Sequence[str] = ("#lab",), extra: str = "", irc: str = "") -> str:
    listed = ", ".join(f'"{room}"' for room in rooms)
    return (
        f'[channels.irc]\nserver = "127.0.0.1"\nport = {port}\ntls = false\nchannels = [{listed}]\n{irc}'
        "reconnect_min_seconds = 0.05\nreconnect_max_seconds = 0.5\n"
        "[pacing]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\njitter_seconds = 0.0\n" + extra
    )


@contextlib.asynccontextmanager
async def on_irc(
    home: Path, port: int, rooms: Sequence[str] = ("#lab",), irc: str = ""
) -> AsyncIterator[tuple[Pilot, IrcChannel]]:
    clock = ManualClock(START)
    settings = harness_settings(home, model=f"test:{ROOM_DOUBLE}", config=_config(port, rooms, irc=irc))
    async with run_runtime(settings, clock=clock) as pilot, ticking(clock, timedelta(seconds=1), 0.005):
        channel = IrcChannel(
            settings.channels.section(IrcConfig), {pilot.agent.id: pilot.agent}, pilot.runtime
        )
        await channel.start()
        try:
            yield pilot, channel
        finally:
            await channel.stop()


async def _ready(irc: IrcChannel, peer: IrcPeer, room: str | None = None) -> str:
    connection = next(iter(irc.connections.values()))
    await asyncio.wait_for(connection.ready.wait(), 60)
    if room is not None:
        await peer.wait_for(
            lambda h: h.command == "JOIN" and h.nick == connection.nick, f"the agent in {room}"
        )
    return connection.nick


# the protocol, without a server -----------------------------------------------------------------
def test_parse_line_reads_prefix_command_and_trailing() -> None:
    message = parse_line("@time=x :sam!s@host PRIVMSG #lab :hello: there  ")
    assert (message.nick, message.command, message.params) == ("sam", "PRIVMSG", ("#lab", "hello: there  "))
    assert parse_line("PING :irc.test").params == ("irc.test",)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=2000), st.integers(64, 480))
def test_split_text_keeps_every_word_within_the_limit(text: str, limit: int) -> None:
    pieces = split_text(text, limit)
    assert all(piece and len(piece.encode()) <= limit for piece in pieces)
    assert "".join("".join(pieces).split()) == "".join(text.replace("\r", "").split())


def test_bad_irc_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lab"):
        harness_settings(tmp_path, config='[channels.irc]\nserver = "x"\nchannels = ["lab"]\n')
    with pytest.raises(ConfigError, match="port"):
        harness_settings(tmp_path, config='[channels.irc]\nserver = "x"\nport = 70000\n')
    assert IrcConfig(nick="{agent}-bot").nick_for("Ada Lovelace") == "AdaLovelace-bot"


# against ngircd ----------------------------------------------------------------------------------
async def test_room_chatter_is_observed_silently_and_questions_answered(
    tmp_path: Path, ircd: IrcServer
) -> None:
    """Three speakers in a room: the agent keeps out of their small talk, saying why, and
    still records it; named, it answers in the room; privately, it answers privately."""
    sam = await IrcPeer("sam").connect(ircd.port)
    kim = await IrcPeer("kim").connect(ircd.port)
    try:
        async with on_irc(tmp_path / "home", ircd.port) as (pilot, irc):
            await sam.join("#lab")
            await kim.join("#lab")
            nick = await _ready(irc, sam, "#lab")
            await sam.say("#lab", "the weather is lovely today")
            await kim.say("#lab", "yes, sunny all week")
            await pilot.wait_for(lambda: _markers(pilot, 2), "two silent turns")
            await sam.say("#lab", f"{nick}, what did kim say about the week?")
            reply = await sam.wait_for(lambda h: h.nick == nick and h.command == "PRIVMSG", "the answer")
            assert reply.target == "#lab" and "what did kim say" in reply.text
            await kim.say(nick, "\x01VERSION\x01")  # a client's query, not something said
            await kim.say(nick, "just between us: hello")
            private = await kim.wait_for(lambda h: h.nick == nick and h.target == "kim", "a private answer")
            assert private.text == "You said: just between us: hello"
            assert kim.said_by(nick, "kim") == [private.text]  # the CTCP query got no answer
            await pilot.settle()
            events = await _events(pilot)
            chatter = [e for e in events if e.text in ("the weather is lovely today", "yes, sunny all week")]
            markers = [await pilot.store.get_marker(pilot.agent.id, e.id, pilot.clock.now()) for e in chatter]
            assert [m.transmitted for m in markers if m] == [False, False]
            assert all("others are chatting" in (m.reason or "") for m in markers if m)
            # Overheard traffic is still in the dialog (and so consolidated with the rest).
            said = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "irc", "#lab", 10)]
            assert said[:2] == ["the weather is lovely today", "yes, sunny all week"]
            # One contact per nick, whatever room or private conversation it spoke in.
            people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
            assert {"sam", "kim"} <= set(people) and people["kim"].kind == "human"
            assert len([p for p in people if p == "kim"]) == 1
    finally:
        await sam.close()
        await kim.close()


async def test_bytes_that_are_not_utf8_are_kept_with_replacement_characters(
    tmp_path: Path, ircd: IrcServer
) -> None:
    """A Latin-1 client's line is not UTF-8: it is decoded with U+FFFD for each bad byte,
    stored and answered, never a crash or a lost connection (issue 33 item 5)."""
    sam = await IrcPeer("sam").connect(ircd.port)
    try:
        async with on_irc(tmp_path / "home", ircd.port) as (pilot, irc):
            nick = await _ready(irc, sam)
            await sam.send_bytes(b"PRIVMSG " + nick.encode() + b" :caf\xe9 au lait \xff")
            await sam.say(nick, "and then")
            await sam.wait_for(
                lambda h: h.nick == nick and h.text == "You said: and then", "the second answer"
            )
            assert sam.said_by(nick, "sam") == ["You said: caf\ufffd au lait \ufffd", "You said: and then"]
            await pilot.settle()
            said = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "irc", "sam", 10)]
            assert "caf\ufffd au lait \ufffd" in said
    finally:
        await sam.close()


async def test_redirect_answers_privately_and_never_to_someone_absent(
    tmp_path: Path, ircd: IrcServer
) -> None:
    """The decision may move the answer to the asker's private chat (through the outbox); a
    redirect to someone who was not in the room is refused, and the answer stays in the room."""
    sam = await IrcPeer("sam").connect(ircd.port)
    kim = await IrcPeer("kim").connect(ircd.port)
    lee = await IrcPeer("lee").connect(ircd.port)
    try:
        async with on_irc(tmp_path / "home", ircd.port, rooms=("#garden",)) as (pilot, irc):
            await sam.join("#garden")
            await kim.join("#garden")
            nick = await _ready(irc, sam, "#garden")
            ask = f"{nick}, privately please: what is the plan for the garden and the shed this spring and summer?"
            await sam.say("#garden", ask)
            private = await sam.wait_for(lambda h: h.nick == nick and h.command == "PRIVMSG", "the answer")
            assert (private.target, private.text) == ("sam", f"You said: {ask}")
            ask_lee = f"{nick}, privately tell lee what the plan for the garden and the shed is this spring and summer"
            await kim.say("#garden", ask_lee)
            here = await kim.wait_for(
                lambda h: h.nick == nick and h.command == "PRIVMSG", "the answer in the room"
            )
            assert (here.target, here.text) == ("#garden", f"You said: {ask_lee}")
            await pilot.settle()
            assert lee.said_by(nick) == [] and kim.said_by(nick) == [here.text]
            assert sam.said_by(nick) == [private.text, here.text]  # sam saw kim's answer in the room
            events = await _events(pilot)
            markers = [await pilot.store.get_marker(pilot.agent.id, e.id, pilot.clock.now()) for e in events]
            reasons = [m.reason for m in markers if m is not None]
            assert reasons[0] == "redirected to irc:sam: better said in private"
            assert "where someone who is not here could read it" in (reasons[1] or "")
            # The private answer is recorded where it was said; the room's dialog holds only
            # what the room saw: a note that the agent answered sam elsewhere.
            room = [
                (m.role.value, m.text)
                for m in await pilot.store.channel_messages(pilot.agent.id, "irc", "#garden", 10)
            ]
            assert room[:2] == [("user", ask), ("system", "(Ada answered sam privately, on irc:sam)")]
            assert private.text not in [text for _, text in room]
            in_private = await pilot.store.channel_messages(pilot.agent.id, "irc", "sam", 10)
            assert [(m.role.value, m.text) for m in in_private] == [("agent", private.text)]
    finally:
        for peer in (sam, kim, lee):
            await peer.close()


async def test_long_reply_is_split_at_the_line_limit(tmp_path: Path, ircd: IrcServer) -> None:
    sam = await IrcPeer("sam2").connect(ircd.port)
    try:
        async with on_irc(tmp_path / "home", ircd.port, rooms=()) as (pilot, irc):
            nick = await _ready(irc, sam)
            await sam.say(nick, "tell me everything")
            await sam.wait_for(lambda h: h.nick == nick and "word179" in h.text, "the end of the reply")
            lines = sam.said_by(nick, "sam2")
            assert len(lines) >= 3 and all(len(line.encode()) <= 400 for line in lines)
            assert " ".join(lines) == LONG_REPLY
            await pilot.settle()
    finally:
        await sam.close()


async def test_a_long_reply_in_a_long_named_room_fits_the_relayed_line(
    tmp_path: Path, ircd: IrcServer
) -> None:
    """IRC's 512 bytes hold the whole relayed line, the sender's `nick!user@host` prefix and
    the target included. Pieces of `line_bytes` alone overflowed it: with a long room name
    ngircd closed the agent's connection ("Request too long") and the outbox retried the same
    reply for ever; with a short one, the server cut the end off each piece others received."""
    room = "#" + "r" * 45
    sam = await IrcPeer("sam5").connect(ircd.port)
    try:
        await sam.join(room)
        async with on_irc(tmp_path / "home", ircd.port, rooms=(room,), irc="line_bytes = 480\n") as (
            pilot,
            irc,
        ):
            nick = await _ready(irc, sam, room)
            await sam.say(room, f"{nick}: tell me everything")
            await sam.wait_for(lambda h: h.nick == nick and "word179" in h.text, "the end of the reply")
            lines = sam.said_by(nick, room)
            assert " ".join(lines) == LONG_REPLY
            await pilot.settle()
            assert next(iter(irc.connections.values())).connections == 1  # never thrown off
    finally:
        await sam.close()


async def test_one_person_or_room_is_one_channel_whatever_the_letter_case(
    tmp_path: Path, ircd: IrcServer
) -> None:
    """IRC compares nicks and room names without case. The channel kept the case of the
    moment ("Zoe", "#Lab") while the speaker id and a redirect used lower case, so one
    person's private talk split into two conversations (and compartments), and a private
    answer redirected to "zoe" was not where Zoe's own private messages were."""
    zoe = await IrcPeer("Zoe").connect(ircd.port)
    try:
        await zoe.join("#Lab")
        async with on_irc(tmp_path / "home", ircd.port, rooms=("#lab",)) as (pilot, irc):
            nick = await _ready(irc, zoe, "#lab")
            await zoe.say(nick, "hello from Zoe")
            await zoe.wait_for(lambda h: h.nick == nick and "hello from Zoe" in h.text, "the first answer")
            await zoe.send("NICK zoe")
            await zoe.wait_for(lambda h: h.command == "NICK" and h.nick == "Zoe", "the new nick")
            await zoe.say(nick, "hello again from zoe")
            await zoe.wait_for(lambda h: h.nick == nick and "again" in h.text, "the second answer")
            await zoe.say("#LAB", f"{nick}: and in the room")
            await zoe.wait_for(lambda h: h.nick == nick and "in the room" in h.text, "the room answer")
            await pilot.settle()
            private = await pilot.store.channel_messages(pilot.agent.id, "irc", "zoe", 10)
            said = [m.text for m in private if m.role.value == "user"]
            assert said == ["hello from Zoe", "hello again from zoe"]
            room = await pilot.store.channel_messages(pilot.agent.id, "irc", "#lab", 10)
            assert [m.text for m in room if m.role.value == "user"] == [f"{nick}: and in the room"]
    finally:
        await zoe.close()


async def test_nick_collision_and_kick(tmp_path: Path, ircd: IrcServer) -> None:
    """The agent's nick is taken: it takes the next free one and answers there; kicked from a
    room, it joins again."""
    squatter = await IrcPeer("Ada").connect(ircd.port)
    await squatter.join("#ops")  # first in: the room's operator
    try:
        async with on_irc(tmp_path / "home", ircd.port, rooms=("#ops",)) as (pilot, irc):
            nick = await _ready(irc, squatter, "#ops")
            assert nick == "Ada_"
            await squatter.say(nick, "are you there?")
            await squatter.wait_for(lambda h: h.nick == nick and h.command == "PRIVMSG", "an answer")
            joins = sum(1 for h in squatter.heard if h.command == "JOIN" and h.nick == nick)
            await squatter.send(f"KICK #ops {nick} :out")
            await squatter.wait_for(
                lambda h: (
                    h.command == "JOIN"
                    and h.nick == nick
                    and squatter.heard.count(h) >= 1
                    and sum(1 for x in squatter.heard if x.command == "JOIN" and x.nick == nick) > joins
                ),
                "the agent back in #ops",
            )
            await pilot.settle()
    finally:
        await squatter.close()


async def test_a_taken_nick_is_taken_back_when_its_holder_leaves(tmp_path: Path, ircd: IrcServer) -> None:
    """Registered as Ada_ because Ada was taken (as by its own connection's ghost after a
    network blip): when the holder quits, the agent renames itself back and answers as Ada."""
    holder = await IrcPeer("Ada").connect(ircd.port)
    await holder.join("#lab")
    sam = await IrcPeer("sam4").connect(ircd.port)
    await sam.join("#lab")
    try:
        async with on_irc(tmp_path / "home", ircd.port) as (pilot, irc):
            assert await _ready(irc, sam, "#lab") == "Ada_"
            await holder.send("QUIT :bye")
            renamed = await sam.wait_for(lambda h: h.command == "NICK" and h.nick == "Ada_", "Ada_ renamed")
            assert (renamed.target or renamed.text) == "Ada"
            await sam.say("#lab", "Ada, what did I say?")
            await sam.wait_for(lambda h: h.nick == "Ada" and h.command == "PRIVMSG", "an answer from Ada")
            await pilot.settle()
    finally:
        await holder.close()
        await sam.close()


async def test_server_restart_loses_and_doubles_nothing(tmp_path: Path, ircd: IrcServer) -> None:
    """The server dies mid-conversation. What the agent says meanwhile waits in the outbox;
    it reconnects with backoff, rejoins, and delivers it exactly once; the conversation goes on."""
    sam = await IrcPeer("sam3").connect(ircd.port)
    try:
        async with on_irc(tmp_path / "home", ircd.port) as (pilot, irc):
            await sam.join("#lab")
            nick = await _ready(irc, sam, "#lab")
            await sam.say(nick, "remember me")
            await sam.wait_for(
                lambda h: h.nick == nick and h.text == "You said: remember me", "the first answer"
            )
            await pilot.settle()
            first = (await _events(pilot))[-1]
            person = (await pilot.store.get_event(pilot.agent.id, first.id)) and next(
                p for p in await pilot.full_store.list_persons(pilot.agent.id) if p.display_name == "sam3"
            )
            assert person
            await sam.close()
            connection = next(iter(irc.connections.values()))
            ircd.stop()
            await pilot.wait_for(_negated(connection.ready.is_set), "the adapter to notice")
            status = await pilot.runtime.outreach.send_to_contact(
                pilot.agent.id, first.id, person.id, "irc", "sam3", "while you were away"
            )
            assert "retried" in status or "not connected" in status
            ircd.start()
            sam = await IrcPeer("sam3").connect(ircd.port)
            await sam.wait_for(lambda h: h.text == "while you were away", "the held message")
            assert connection.connections >= 2
            await sam.join("#lab")
            await sam.wait_for(  # it rejoined before sam came back (NAMES lists it) or after
                lambda h: (
                    (h.command == "JOIN" and h.nick == nick)
                    or (h.command == "353" and nick in [n.lstrip("@+") for n in h.text.split()])
                ),
                "the agent back in #lab",
            )
            await sam.say("#lab", f"{nick}: still there?")
            await sam.wait_for(
                lambda h: h.nick == nick and "still there" in h.text, "an answer after the restart"
            )
            await pilot.settle()
            assert sam.said_by(nick).count("while you were away") == 1
            assert sam.said_by(nick, "#lab") == [f"You said: {nick}: still there?"]
            rows = await pilot.store.pending_outbox(pilot.agent.id, "irc")
            assert rows == []
    finally:
        await sam.close()


def _negated(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def negated() -> bool:
        return not check()

    return negated


async def _events(pilot: Pilot) -> list[Event]:
    conversations = await pilot.full_store.list_conversations(pilot.agent.id, limit=50)
    found: list[Event] = []
    for conversation in conversations:
        for message in await pilot.store.recent_messages(pilot.agent.id, conversation.id, 50):
            if message.event_id and message.role.value == "user":
                event = await pilot.store.get_event(pilot.agent.id, message.event_id)
                if event is not None:
                    found.append(event)
    return sorted(found, key=lambda e: e.received_at)


async def _markers(pilot: Pilot, count: int) -> bool:
    events = await _events(pilot)
    done = [await pilot.store.get_marker(pilot.agent.id, e.id, pilot.clock.now()) for e in events]
    return sum(1 for m in done if m is not None) >= count


async def test_server_password_wrong_then_right(tmp_path: Path) -> None:
    """A server that wants a password: with a wrong one the adapter is refused, says so in the
    log and keeps retrying without taking the runtime down; with the right one it serves."""
    server = IrcServer(tmp_path / "ircd", password="opensesame")
    server.directory.mkdir()
    server.start()
    sam = await IrcPeer("sam").connect(server.port, password="opensesame")
    try:
        settings = harness_settings(
            tmp_path / "home", model=f"test:{ROOM_DOUBLE}", config=_config(server.port, ())
        )
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            wrong = IrcChannel(
                settings.channels.section(IrcConfig),
                {pilot.agent.id: pilot.agent},
                pilot.runtime,
                password="nope",
            )
            await wrong.start()
            refused = next(iter(wrong.connections.values()))
            await pilot.wait_for(_attempts(wrong, 2), "a second attempt after the refusal")
            assert not refused.ready.is_set() and refused.connections == 0
            await wrong.stop()
            right = IrcChannel(
                settings.channels.section(IrcConfig),
                {pilot.agent.id: pilot.agent},
                pilot.runtime,
                password="opensesame",
            )
            await right.start()
            try:
                nick = await _ready(right, sam)
                await sam.say(nick, "let me in")
                answer = await sam.wait_for(lambda h: h.nick == nick and h.command == "PRIVMSG", "an answer")
                assert answer.text == "You said: let me in"
                await pilot.settle()
            finally:
                await right.stop()
    finally:
        await sam.close()
        server.stop()


def _attempts(channel: IrcChannel, count: int) -> Callable[[], Awaitable[bool]]:
    async def attempted() -> bool:
        return all(c.attempts >= count for c in channel.connections.values())

    return attempted


async def test_a_known_contact_listed_in_bots_later_becomes_an_agent(tmp_path: Path, ircd: IrcServer) -> None:
    """`[channels.irc] bots` changed after a nick was met as a person: the next time it speaks
    its contact (the same one) is of kind `agent`, so the pacing for agents applies to it."""
    bob = await IrcPeer("bob").connect(ircd.port)
    try:
        async with on_irc(tmp_path / "home", ircd.port, rooms=()) as (pilot, irc):
            nick = await _ready(irc, bob)
            await bob.say(nick, "hello, I am just bob")
            await bob.wait_for(lambda h: h.nick == nick and h.command == "PRIVMSG", "an answer")
            await pilot.settle()
            first = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}["bob"]
            assert first.kind == "human"
            await irc.stop()
            listed = pilot.settings.channels.section(IrcConfig).model_copy(
                update={"bots": ["Bob"]}
            )  # nicks match any case
            restarted = IrcChannel(listed, {pilot.agent.id: pilot.agent}, pilot.runtime)
            await restarted.start()
            try:
                await _ready(restarted, bob)
                await bob.say(nick, "hello again, I am a bot after all")

                async def marked() -> bool:
                    person = await pilot.store.get_person(pilot.agent.id, first.id)
                    return person is not None and person.kind == "agent"

                await pilot.wait_for(marked, "bob's contact marked as an agent")
                await pilot.settle()
                people = [
                    p for p in await pilot.full_store.list_persons(pilot.agent.id) if p.display_name == "bob"
                ]
                assert [p.id for p in people] == [first.id]  # the same contact, not a new one
            finally:
                await restarted.stop()
    finally:
        await bob.close()


async def test_the_connection_state_follows_the_server(tmp_path: Path, ircd: IrcServer) -> None:
    """What the console's channel view reads (`RuntimeAPI.channel_states`): connected while the
    server is up; reconnecting, then failing with the refusal once attempts in a row fail while
    it is down; connected again when it is back."""

    def irc_state(pilot: Pilot) -> tuple[Link, int, str]:
        (state,) = [s for s in pilot.runtime.channel_states() if s.service == "irc"]
        return state.link, state.failures, state.detail

    def now_in(link: Link) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return irc_state(pilot)[0] is link

        return check

    async with on_irc(tmp_path / "home", ircd.port) as (pilot, irc):
        connection = next(iter(irc.connections.values()))
        await asyncio.wait_for(connection.ready.wait(), 60)
        assert irc_state(pilot) == (Link.CONNECTED, 0, "")
        # Named by the nick it is configured with: the one it registered under may be a stand-in
        # (`Ada_`) while another connection holds it, and changes when it is taken back.
        names = [s.name for s in pilot.runtime.channel_states() if s.service == "irc"]
        assert names == [connection.wanted_nick]
        ircd.stop()
        await pilot.wait_for(now_in(Link.FAILING), "failing while the server is down")
        _, failures, detail = irc_state(pilot)
        assert failures >= 3 and detail  # the last refusal, as the adapter logged it
        ircd.start()
        await pilot.wait_for(now_in(Link.CONNECTED), "connected again")
        assert irc_state(pilot) == (Link.CONNECTED, 0, "")
