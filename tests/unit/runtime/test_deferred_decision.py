"""Deferred deliberation decides on the input while the draft is written (issue 14, figure 1).

Through the real runtime (DBOS, SQLite, gateway, meter) with a model double that tells the
decision on the input (its own prompt, `templates/decide_on_input.md`) from the decision on
a draft, and that holds the draft back until the decision has begun: a runtime that decided
only after drafting would never release it. No timing is asserted; a turn that never
overlaps the two calls fails on what the draft says, after the double gives up waiting.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from sqlalchemy.engine import Connection

from persyn.cognition.deliberation import Critique, Decision
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.store.base import Message
from persyn.store.ports.runs import SpendKind
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing import START, Pilot, RecordingChannel, run_runtime
from persyn.testing.models import DoubleReply, last_user_text, registered_double

T = TypeVar("T")

SUBSTANTIVE = "Honestly, I think the garden plan will work out well if we start the beds early."
ON_INPUT = "before you write your reply"  # in the decide-on-input brief only
GIVE_UP_SECONDS = 30.0  # only ever reached when the runtime does not overlap the calls


class Overlapping:
    """`test:overlap`: the draft waits until the decision on the input has begun."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.decision = Decision(action="speak", reason="it is a fair question")
        self.deciding: asyncio.Event | None = None
        # What the store had been asked when each call began (set by a test that counts).
        self.reads: Callable[[], int] = lambda: 0
        self.reads_at: dict[str, int] = {}

    def started(self) -> asyncio.Event:
        if self.deciding is None:
            self.deciding = asyncio.Event()
        return self.deciding

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        system = info.instructions or ""
        if task == "decide":
            kind = "decide:input" if ON_INPUT in system else "decide:draft"
            self.log.append(f"{kind}:start")
            self.reads_at.setdefault(kind, self.reads())
            self.started().set()
            self.log.append(f"{kind}:end")
            return self.decision
        if task == "respond":
            said = last_user_text(messages)
            self.log.append("respond:start")
            self.reads_at.setdefault("respond", self.reads())
            try:
                await asyncio.wait_for(self.started().wait(), GIVE_UP_SECONDS)
                text = SUBSTANTIVE if "garden" in said else "Hi Sam!"
            except TimeoutError:
                text = "the decision had not begun when I finished drafting"
            self.log.append("respond:end")
            return DoubleReply(text=text)
        if task == "critique":
            return Critique()
        return DoubleReply(text="ok")


@pytest.fixture
def mind() -> Iterator[Overlapping]:
    instance = Overlapping()
    with registered_double("overlap", instance):
        yield instance


def _runtime(tmp_path: Path, config: str = "") -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home",
        model="test:overlap",
        config=config,
        agent=AgentConfig(name="Ada", id=new_id(START)),
        channels={"test": RecordingChannel(interactive=True)},  # interactive: deferred
    )


async def test_the_deferred_turn_decides_on_the_input_while_the_draft_is_written(
    tmp_path: Path, mind: Overlapping
) -> None:
    async with _runtime(tmp_path) as pilot:
        event, marker = await pilot.say("What do you think of the garden plan we discussed last week?")
        assert marker.transmitted and marker.text == SUBSTANTIVE
        # The decision began before the draft was finished (the draft says so: it waited for
        # it), and no decision on the draft followed.
        assert mind.log.index("decide:input:start") < mind.log.index("respond:end")
        assert sorted(mind.log) == ["decide:input:end", "decide:input:start", "respond:end", "respond:start"]
        on_turn = sorted(r.stage for r in pilot.usage() if r.thread_id == event.id)
        assert on_turn == ["decide", "respond"]  # one of each, no more than before
        (trace,) = await pilot.store.deliberation_traces(pilot.agent.id, [event.id])
        assert trace.trace["decision"] == mind.decision.model_dump(mode="json")


async def test_silence_decided_on_the_input_withdraws_the_draft(tmp_path: Path, mind: Overlapping) -> None:
    mind.decision = Decision(action="silent", reason="Sam asked me to stop giving garden advice")
    async with _runtime(tmp_path) as pilot:
        event, marker = await pilot.say("What do you think of the garden plan we discussed last week?")
        assert not marker.transmitted
        assert marker.reason == "Ada chose silence: Sam asked me to stop giving garden advice"
        assert pilot.channel.delivered == []  # the draft was written, and withdrawn
        assert "respond:end" in mind.log
        await pilot.settle()  # a withdrawn draft is not reconsidered in the background either
        assert sorted(r.stage for r in pilot.usage()) == ["decide", "respond"]
        agent_said = [
            m
            for m in await pilot.store.channel_messages(pilot.agent.id, "test", "room", 10)
            if m.event_id == event.id and m.role.value == "agent"
        ]
        assert agent_said == []


async def test_a_refusal_decided_on_the_input_replaces_the_draft(tmp_path: Path, mind: Overlapping) -> None:
    mind.decision = Decision(
        action="decline",
        reason="it would mean digging up the neighbour's garden",
        message="I won't help with that: the beds would go into your neighbour's garden.",
    )
    async with _runtime(tmp_path) as pilot:
        _, marker = await pilot.say("How do we start the garden beds on next door's lawn this week?")
        assert marker.transmitted
        assert marker.text == "I won't help with that: the beds would go into your neighbour's garden."
        assert [o.text for o in pilot.channel.delivered] == [marker.text]


async def test_a_plain_input_whose_reply_is_substantive_waits_for_one_call_not_two(
    tmp_path: Path, mind: Overlapping
) -> None:
    """A plain input ("Nice garden plan") whose reply is substantive needs a model decision:
    the decision is made on the input while the draft is written (`[deliberation]
    decide_ahead`), not on the draft after it — two model calls in a row before (issue 33)."""
    async with _runtime(tmp_path) as pilot:
        event, marker = await pilot.say("Nice garden plan")
        assert marker.transmitted and marker.text == SUBSTANTIVE
        assert mind.log.index("decide:input:start") < mind.log.index("respond:end")
        assert "decide:draft:start" not in mind.log
        on_turn = sorted(r.stage for r in pilot.usage() if r.thread_id == event.id)
        assert on_turn == ["decide", "respond"]


async def test_a_decision_made_ahead_never_decides_a_plain_reply(tmp_path: Path, mind: Overlapping) -> None:
    """A plain input answered plainly keeps the model-free path: a decision begun ahead of
    need is dropped, even one that came back (here: silence) before the draft."""
    mind.decision = Decision(action="silent", reason="nothing to add")
    async with _runtime(tmp_path) as pilot:
        _, marker = await pilot.say("Hi Ada")
        assert marker.transmitted and marker.text == "Hi Sam!"
        assert mind.log.index("decide:input:end") < mind.log.index("respond:end")


async def test_a_plain_input_costs_no_decision(tmp_path: Path, mind: Overlapping) -> None:
    """Without deciding ahead, a short plain exchange keeps the model-free path: one call per
    turn."""
    mind.started().set()  # nothing to wait for here
    async with _runtime(tmp_path, "[deliberation]\ndecide_ahead = false\n") as pilot:
        _, marker = await pilot.say("Hi Ada")
        assert marker.transmitted and marker.text == "Hi Sam!"
        assert [r.stage for r in pilot.usage()] == ["respond"]
        assert not any(entry.startswith("decide") for entry in mind.log)


class _CountingStore(SQLiteStore):
    """The real SQLite store, counting the reads of a channel's reply budget and of a
    turn's dialog (every call still goes to the file)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.budget_reads = 0
        self.dialog_reads = 0
        self.reads: Counter[str] = Counter()  # every read, by what it reads

    async def _read(self, what: str, work: Callable[[Connection], T]) -> T:
        self.reads[what] += 1
        return await super()._read(what, work)

    async def _search(self, what: str, work: Callable[[Connection], T]) -> T:
        self.reads[what] += 1
        return await super()._search(what, work)

    def context_reads(self) -> int:
        """Reads of what a turn's prompt and decision weigh (not the model-call checkpoints
        looked up before each call)."""
        return sum(n for what, n in self.reads.items() if what != "model_call")

    async def channel_spent(
        self, agent_id: str, kind: SpendKind, service: str, channel: str, since: datetime
    ) -> int:
        if kind is SpendKind.REPLIED:
            self.budget_reads += 1
        return await super().channel_spent(agent_id, kind, service, channel, since)

    async def turn_messages(
        self, agent_id: str, conversation_id: str, input_message_id: str, limit: int
    ) -> list[Message]:
        self.dialog_reads += 1
        return await super().turn_messages(agent_id, conversation_id, input_message_id, limit)


async def test_a_turn_that_decides_on_its_input_reads_the_budget_and_the_dialog_once(
    tmp_path: Path, mind: Overlapping
) -> None:
    """The draft and the decision start together and share what they read: the turn's dialog
    (one read, both waiting on it) and the reply budget (read once for the step). Deferred
    critique is off, so no background step reads the dialog again."""
    store = _CountingStore(tmp_path / "home" / "data" / "persyn.db")
    async with run_runtime(
        tmp_path / "home",
        model="test:overlap",
        config="[deliberation]\nenabled = false\n",
        agent=AgentConfig(name="Ada", id=new_id(START)),
        channels={"test": RecordingChannel(interactive=True)},
        store=store,
    ) as pilot:
        _event, marker = await pilot.say("What do you think of the garden plan we discussed last week?")
        assert marker.transmitted and marker.text == SUBSTANTIVE
        assert (store.budget_reads, store.dialog_reads) == (1, 1)


async def test_the_decision_made_ahead_starts_with_the_draft(tmp_path: Path, mind: Overlapping) -> None:
    """Substantive input, substantive reply: the decision's own reads (the agent's facts about
    itself, its goals, its current state) are made with the draft's prompt, so no read stands
    between the draft's model call and the decision's: both begin together, and the turn waits
    for one model call, not one and a bit (issue 33: 1.29x). The open goals are read once for
    the prompt and the decision."""
    store = _CountingStore(tmp_path / "home" / "data" / "persyn.db")
    mind.reads = store.context_reads
    async with run_runtime(
        tmp_path / "home",
        model="test:overlap",
        agent=AgentConfig(name="Ada", id=new_id(START)),
        channels={"test": RecordingChannel(interactive=True)},
        store=store,
    ) as pilot:
        store.reads.clear()
        _event, marker = await pilot.say("What do you think of the garden plan we discussed last week?")
        assert marker.transmitted and marker.text == SUBSTANTIVE
        assert mind.reads_at["decide:input"] == mind.reads_at["respond"] > 0
        assert store.reads["fact_rows"] == 1 and store.reads["list_goals"] == 1
