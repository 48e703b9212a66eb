"""The rule when a deferred turn's draft comes back while its decision on the input is still
being made (docs/architecture.md §3, §10): a short plain draft is sent on the deterministic
gates alone and the decision is cancelled; a substantive draft waits for the decision,
which still replaces it.

Through the real runtime (DBOS, SQLite, gateway, meter) with a double whose draft is always
finished first: the draft waits until the decision has begun, and the decision waits until
the draft is finished (for the short draft, until it is cancelled). Nothing is timed: a
runtime that awaited the decision for a short draft would wait until the double gives up,
then send the refusal instead of the draft, and fail on what was said.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.deliberation import Decision, is_substantive
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.testing import START, Pilot, RecordingChannel, run_runtime
from persyn.testing.models import DoubleReply, last_user_text, registered_double

QUESTION = "What should we plant in the new garden beds this spring, do you think?"
SHORT = "Tomatoes and beans."
LONG = "Tomatoes along the sunny fence, beans up the trellis, and lettuce in the shade of the old pear tree."
REFUSAL = Decision(
    action="decline", reason="the beds are not ours to plan", message="That is not my call to make."
)
GIVE_UP_SECONDS = 30.0  # only reached when a short draft waits for its decision


class Racing:
    """`test:race`: the draft is written once the decision on the input has begun, and that
    decision ends only after the draft (for a short draft: never, unless the runtime waits)."""

    def __init__(self, draft: str) -> None:
        self.draft = draft
        self.log: list[str] = []
        self._deciding = asyncio.Event()
        self._drafted = asyncio.Event()

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "decide":
            self.log.append("decide:start")
            self._deciding.set()
            try:
                await self._drafted.wait()
                if self.draft == SHORT:  # a short draft is sent without this decision
                    await asyncio.sleep(GIVE_UP_SECONDS)
            except asyncio.CancelledError:
                self.log.append("decide:cancelled")
                raise
            self.log.append("decide:end")
            return REFUSAL
        if task == "respond" and last_user_text(messages).endswith(QUESTION):
            await self._deciding.wait()
            self.log.append("respond:end")
            self._drafted.set()
            return DoubleReply(text=self.draft)
        return DoubleReply(text="ok")


@pytest.fixture(params=[SHORT, LONG], ids=["short-plain-draft", "substantive-draft"])
def mind(request: pytest.FixtureRequest) -> Iterator[Racing]:
    instance = Racing(request.param)
    with registered_double("race", instance):
        yield instance


def _runtime(tmp_path: Path) -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home",
        model="test:race",
        agent=AgentConfig(name="Ada", id=new_id(START)),
        channels={"test": RecordingChannel(interactive=True)},  # interactive: deferred
    )


def test_the_drafts_are_what_the_rule_tells_apart() -> None:
    assert is_substantive(QUESTION, 12)  # so the turn decides on its input
    assert not is_substantive(SHORT, 12) and is_substantive(LONG, 12)


async def test_a_draft_that_beats_its_decision(tmp_path: Path, mind: Racing) -> None:
    async with _runtime(tmp_path) as pilot:
        event, marker = await pilot.say(QUESTION)
        on_turn = sorted(r.stage for r in pilot.usage() if r.thread_id == event.id)
        if mind.draft == SHORT:
            # Sent on the gates alone: the decision in flight was cancelled, and not billed.
            assert marker.transmitted and marker.text == SHORT
            assert mind.log == ["decide:start", "respond:end", "decide:cancelled"]
            assert on_turn == ["respond"]
        else:
            # Awaited although the draft was ready first: its refusal replaces the draft.
            assert marker.transmitted and marker.text == REFUSAL.message
            assert marker.reason == f"declined: {REFUSAL.reason}"
            assert mind.log == ["decide:start", "respond:end", "decide:end"]
            assert on_turn == ["decide", "respond"]
        assert [o.text for o in pilot.channel.delivered] == [marker.text]
