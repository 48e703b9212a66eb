"""Two agents of one deployment talking directly, each with a model double that always has
more to say (SPEC §4.5, §9 "a conversation with another agent that terminates on its own"):
the exchange ends by itself, the safeguard that ended it is recorded, the reply ledger stays
within the budget, and a person who speaks afterwards is still answered.

The clock is a `ManualClock` that a ticker moves on: the intervals, backoff and delays are
waited out on it, never on the wall clock, and nothing here asserts a duration."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from persyn.channels.agents.link import AGENT_SERVICE, AgentLink
from persyn.core.clock import ManualClock
from persyn.store.base import Role
from persyn.store.ports.runs import SpendKind
from persyn.testing import models
from persyn.testing.harness import ADA, START, Pilot, RecordingChannel, Where, harness_settings, run_runtime
from persyn.testing.pacing import BOB, chatty, ticking

CHATTY = "chatty"


@pytest.fixture(autouse=True)
def _double() -> Iterator[None]:
    models.register_double(CHATTY, chatty("notion"), replace=True)
    yield
    models.unregister_double(CHATTY)


@contextlib.asynccontextmanager
async def two_agents(home: Path, pacing: str = "") -> AsyncIterator[Pilot]:
    settings = harness_settings(home, model=f"test:{CHATTY}", config=pacing)
    settings = settings.model_copy(update={"agents": [ADA, BOB]})
    clock = ManualClock(START)
    async with run_runtime(settings, clock=clock) as pilot:
        link = AgentLink(
            {ADA.id: ADA, BOB.id: BOB},
            pilot.runtime,
            max_message_chars=settings.conversation.max_message_chars,
        )
        await link.start()
        try:
            async with ticking(clock):
                yield pilot
        finally:
            await link.stop()


async def _start_exchange(pilot: Pilot) -> None:
    """Ada, asked by a person, writes to Bob first (`message_contact`'s path)."""
    turn = await pilot.say("Ada, please say hello to Bob")
    bob = next(p for p in await pilot.full_store.list_persons(ADA.id) if p.kind == "agent")
    assert bob.display_name == "Bob"
    status = await pilot.runtime.outreach.send_to_contact(
        ADA.id, turn.event.id, bob.id, AGENT_SERVICE, BOB.id, "Hello Bob, what are you thinking about?"
    )
    assert status == f"delivered on {AGENT_SERVICE}:{BOB.id}"


async def _traces(pilot: Pilot, agent_id: str, other_id: str) -> list[dict[str, Any]]:
    said = await pilot.store.channel_messages(agent_id, AGENT_SERVICE, other_id, 200)
    ids = [m.event_id for m in said if m.role is Role.USER and m.event_id]
    return [t.trace for t in await pilot.store.deliberation_traces(agent_id, ids)]


async def _agent_messages(pilot: Pilot) -> int:
    ada = await pilot.store.channel_messages(ADA.id, AGENT_SERVICE, BOB.id, 200)
    return len(ada)


@pytest.mark.parametrize(
    ("pacing", "ended_by"),
    [
        ("", "messages in a row by agents"),
        ("[pacing]\nagent_reply_tokens = 40\nmax_agent_turns = 50\n", "reply budget with agents"),
    ],
    ids=["turn-limit", "budget"],
)
async def test_two_agents_stop_on_their_own(tmp_path: Path, pacing: str, ended_by: str) -> None:
    async with two_agents(tmp_path / "home", pacing) as pilot:
        await _start_exchange(pilot)
        await pilot.settle()  # the queue drains only once the exchange has ended
        said = await pilot.store.channel_messages(ADA.id, AGENT_SERVICE, BOB.id, 200)
        rules = pilot.settings.pacing
        assert 2 < len(said) <= rules.max_agent_turns + 1, [m.text for m in said]
        assert all(m.person_id is None or m.role is Role.USER for m in said)
        # The safeguard that ended it is recorded as the decision of the last turn.
        traces = await _traces(pilot, ADA.id, BOB.id) + await _traces(pilot, BOB.id, ADA.id)
        reasons = [t["decision"]["reason"] for t in traces if "decision" in t]
        assert any(ended_by in reason for reason in reasons), reasons
        # Every reply that went out waited out the pacing, and says so.
        holds = [t["pacing"] for t in traces if "pacing" in t]
        assert holds and all(h["with_agent"] for h in holds)
        assert max(h["interval_seconds"] for h in holds) > rules.agent_min_interval_seconds  # backoff grew
        # The reply ledger stayed within the budget on both sides.
        since = pilot.clock.now() - timedelta(hours=24)
        for me, other in ((ADA.id, BOB.id), (BOB.id, ADA.id)):
            spent = await pilot.store.channel_spent(me, SpendKind.REPLIED, AGENT_SERVICE, other, since)
            assert 0 < spent <= rules.agent_reply_tokens
        # A person is still answered.
        later = await pilot.say("Ada, are you still with us?", speaker="sam")
        assert later.marker.transmitted
        count = await _agent_messages(pilot)
        await pilot.settle()
        assert await _agent_messages(pilot) == count  # and the agents did not start again


async def test_a_reply_the_other_agent_cannot_take_in_never_blocks_the_link(tmp_path: Path) -> None:
    """Bob's replies are longer than `[conversation] max_message_chars` (and carry a NUL): Ada's
    intake refused them, the delivery raised, and the outbox retried the head row for ever,
    so nothing after it reached Ada. Now they arrive cut to the limit, marked as cut."""
    models.register_double(CHATTY, chatty("notion", words=30, lead="\x00"), replace=True)
    config = "[conversation]\nmax_message_chars = 120\n[pacing]\nmax_agent_turns = 4\n"
    async with two_agents(tmp_path / "home", config) as pilot:
        await _start_exchange(pilot)
        await pilot.settle()
        for agent_id in (ADA.id, BOB.id):
            assert await pilot.store.pending_outbox(agent_id, AGENT_SERVICE) == []
        heard = await pilot.store.channel_messages(ADA.id, AGENT_SERVICE, BOB.id, 200)
        from_bob = [m.text for m in heard if m.role is Role.USER]
        assert from_bob and all(len(t) <= 120 and t.endswith("[…]") and "\x00" not in t for t in from_bob)


async def test_a_human_resets_the_agent_only_exchange(tmp_path: Path) -> None:
    """After the exchange ended on its turn limit, a person joining in resets it: the agent
    answers again on that channel."""
    async with two_agents(tmp_path / "home", "[pacing]\nmax_agent_turns = 3\n") as pilot:
        await _start_exchange(pilot)
        await pilot.settle()
        before = await _agent_messages(pilot)
        ended = await pilot.say("Bob, your turn", service=AGENT_SERVICE, channel=BOB.id, speaker="sam")
        assert ended.marker.transmitted, ended.marker
        await pilot.settle()
        assert await _agent_messages(pilot) > before + 1


async def test_a_burst_in_a_room_gets_one_answer_after_the_listening_period(tmp_path: Path) -> None:
    """Three messages in a row on a paced channel: the first two turns listen, find the next
    message queued behind them and stay silent, saying so; the last answers once. All three
    are in the dialog. The listening period ends only when the moved clock reaches it."""
    clock = ManualClock(START)
    room = RecordingChannel("irc")
    async with run_runtime(tmp_path / "home", clock=clock, channels={"irc": room}) as pilot:
        where: Where = {"service": "irc", "channel": "#lab", "speaker": "sam"}
        said_at = [START + timedelta(milliseconds=n) for n in range(3)]  # one after another
        texts = ("one thing", "another thing", "Ada, a question?")
        events = [pilot.event(text, at=at, **where) for text, at in zip(texts, said_at, strict=True)]
        for event in events:
            await pilot.runtime.submit(event)
        await pilot.wait_for(_queued(pilot, 2), "the burst to queue behind the first turn")
        assert room.delivered == []  # the first turn is listening: nothing is said before the clock moves
        async with ticking(clock, timedelta(seconds=1)):
            markers = [await pilot.runtime.wait_marker(ADA.id, e.id, timeout=120) for e in events]
        assert [m.transmitted for m in markers] == [False, False, True]
        assert all((m.reason or "").startswith("listening: ") for m in markers[:2]), markers
        assert [o.text for o in room.delivered] == ["You said: Ada, a question?"]
        said = await pilot.store.channel_messages(ADA.id, "irc", "#lab", 10)
        assert [m.text for m in said if m.role is Role.USER] == [e.text for e in events]
        usage = pilot.usage()
        assert [r.stage for r in usage].count("respond") == 1  # the merged turns made no model call


def _queued(pilot: Pilot, count: int) -> Callable[[], Awaitable[bool]]:
    async def queued() -> bool:
        return len(await pilot.runtime.intake.queued_events(ADA.id)) >= count

    return queued
