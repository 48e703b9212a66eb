"""Two agents in one ngircd room with model doubles that always reply (SPEC §4.5): the
exchange ends on its own, the safeguard is recorded, the ledger stays within budget, and a
person speaking afterwards is answered. The pacing waits run on a moved clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from irc_server import IrcPeer, IrcServer, running_ircd

from persyn.channels.irc.channel import IrcChannel
from persyn.channels.irc.config import IrcConfig
from persyn.core.clock import ManualClock
from persyn.store.base import Role
from persyn.store.ports.runs import SpendKind
from persyn.testing import models
from persyn.testing.harness import ADA, START, Pilot, harness_settings, run_runtime
from persyn.testing.pacing import BOB, chatty, ticking

CHATTY = "irc-chatty"


@pytest.fixture
def ircd(tmp_path: Path) -> Iterator[IrcServer]:
    """A server of its own: the test needs the nicks Ada and Bob, which a connection another
    test left (or its ghost, until the server notices) could still hold on the session's."""
    yield from running_ircd(tmp_path / "ngircd")


@pytest.fixture(autouse=True)
def _double() -> Iterator[None]:
    models.register_double(CHATTY, chatty("musing"), replace=True)
    yield
    models.unregister_double(CHATTY)


async def _quiet(pilot: Pilot, sam: IrcPeer) -> None:
    """Until nothing is queued and nothing new is said in the room for a few rounds (a
    message on its way through the server is in neither queue)."""
    stable = 0
    heard = -1
    while stable < 3:
        await pilot.settle()
        await asyncio.sleep(0.3)
        now = len(sam.heard)
        stable = stable + 1 if now == heard else 0
        heard = now


async def test_two_agents_in_a_room_stop_on_their_own(tmp_path: Path, ircd: IrcServer) -> None:
    config = (
        f'[channels.irc]\nserver = "127.0.0.1"\nport = {ircd.port}\ntls = false\nchannels = ["#tea"]\n'
        "reconnect_min_seconds = 0.05\n"
    )
    settings = harness_settings(tmp_path / "home", model=f"test:{CHATTY}", config=config)
    settings = settings.model_copy(update={"agents": [ADA, BOB]})
    clock = ManualClock(START)
    sam = await IrcPeer("sam").connect(ircd.port)
    await sam.join("#tea")
    try:
        async with run_runtime(settings, clock=clock) as pilot, ticking(clock):
            irc = IrcChannel(settings.channels.section(IrcConfig), {ADA.id: ADA, BOB.id: BOB}, pilot.runtime)
            await irc.start()
            try:
                for nick in ("Ada", "Bob"):
                    await sam.wait_for(
                        lambda h, n=nick: h.command == "JOIN" and h.nick == n, f"{nick} in #tea"
                    )
                await sam.say("#tea", "Ada, Bob: what do you make of green tea?")
                await _quiet(pilot, sam)
                by_agents = sam.said_by("Ada", "#tea") + sam.said_by("Bob", "#tea")
                rules = settings.pacing
                assert 2 <= len(by_agents) <= rules.max_agent_turns + 1, by_agents
                # Each agent's contact for the other is marked agent (a nick of this deployment).
                for me, other in ((ADA, "Bob"), (BOB, "Ada")):
                    people = {p.display_name: p for p in await pilot.full_store.list_persons(me.id)}
                    assert people[other].kind == "agent" and people["sam"].kind == "human"
                # Why it ended is recorded: the turn limit, or the listening merge of a burst.
                reasons: list[str] = []
                for me in (ADA, BOB):
                    said = await pilot.store.channel_messages(me.id, "irc", "#tea", 100)
                    ids = [m.event_id for m in said if m.role is Role.USER and m.event_id]
                    traces = await pilot.store.deliberation_traces(me.id, ids)
                    reasons += [t.trace["decision"]["reason"] for t in traces if "decision" in t.trace]
                    spent = await pilot.store.channel_spent(
                        me.id, SpendKind.REPLIED, "irc", "#tea", clock.now() - timedelta(hours=24)
                    )
                    assert spent <= rules.agent_reply_tokens
                assert any("messages in a row by agents" in r for r in reasons), reasons
                # A person speaking is answered, and resets the exchange.
                mark = len(sam.heard)
                await sam.say("#tea", "Ada, are you still there?")
                await sam.wait_for(
                    lambda h: sam.heard.index(h) >= mark and h.nick == "Ada" and h.command == "PRIVMSG",
                    "Ada's answer",
                )
                await _quiet(pilot, sam)
            finally:
                await irc.stop()
    finally:
        await sam.close()
