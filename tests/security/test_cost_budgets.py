"""Issue 13 item 9: budgets bound a run while it goes, and replies have a budget too.

- The autonomy budget was checked only before a run started: one beat's tool loop spent
  459,000 tokens against a 200,000-token daily budget. It is now checked before every model
  call a self-initiated run makes, and the run stops cleanly, saying why.
- The per-channel rolling budget of generated tokens (SPEC §4.5, the primary defence against
  two agents talking forever) held only for `message_contact`; replies spend it too now.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.gateway.base import TokenUsage
from persyn.runtime.background.autonomy import recent_activity
from persyn.testing import ADA, registered_double, run_runtime
from persyn.testing.models import DoubleReply

CALL = TokenUsage(input_tokens=40, output_tokens=10)  # every model call costs 50 tokens

QUIET = "[deliberation]\nenabled = false\n"


class Model:
    """Every call costs `CALL`. The heartbeat acts; its respond model calls a new tool every
    time, forever; a message gets a 40-character reply."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.n = 0
        self.counting = False  # the heartbeat's respond model: a new tool call every time

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        self.calls.append(task or "")
        if task == "reflect":
            return DoubleReply(
                output=SelfAssessment(
                    patterns="I keep counting",
                    serves_objectives=True,
                    intention="pursue_goal",
                    plan="count further",
                ),
                usage=CALL,
            )
        if task == "respond" and self.counting:
            self.n += 1
            return DoubleReply(
                tool_calls=[{"name": "calculate", "args": {"expression": f"{self.n} + 1"}}], usage=CALL
            )
        if task == "respond":
            return DoubleReply(text="Here is my forty-character reply to you.", usage=CALL)
        return DoubleReply(text="ok", usage=CALL)


@pytest.fixture
def model() -> Iterator[Model]:
    instance = Model()
    with registered_double("costbudget", instance):
        yield instance


async def test_a_beat_that_keeps_calling_tools_stops_at_the_daily_budget(
    tmp_path: Path, model: Model
) -> None:
    async with run_runtime(
        tmp_path / "home",
        model="test:costbudget",
        config=QUIET + "[autonomy]\ndaily_token_budget = 300\n[tools]\nmax_round_trips = 50\n",
    ) as pilot:
        channel = pilot.channel
        model.counting = True
        assert await pilot.fire(timedelta(hours=1)) == 1  # the heartbeat
        (entry,) = await recent_activity(pilot.full_store, ADA.id)
        assert entry.kind == "heartbeat"
        assert entry.outcome == (
            "stopped: the autonomy budget of 300 tokens per 24 hours is used (300); this run makes no "
            "more model calls"
        )
        assert entry.tokens == 300  # six calls: never more than the budget plus one call
        metered = [r for r in pilot.usage() if r.thread_id == entry.id]
        assert sum(r.input_tokens + r.output_tokens for r in metered) == 300
        assert [r.stage for r in metered] == ["heartbeat:assess"] + ["respond"] * 5
        assert channel.delivered == []  # a stopped run says nothing
        # The next beat is skipped before it starts: the window's budget is used.
        assert await pilot.fire(timedelta(hours=1)) == 1
        latest = (await recent_activity(pilot.full_store, ADA.id))[0]
        assert latest.outcome.startswith(
            "skipped: the autonomy budget of 300 tokens per 24 hours is used (300)"
        )


async def test_a_channel_over_its_reply_budget_gets_no_generated_reply(tmp_path: Path, model: Model) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:costbudget", config=QUIET + "[autonomy]\nchannel_reply_tokens = 10\n"
    ) as pilot:
        channel = pilot.channel
        _, first = await pilot.say("Hello there!")  # 40 characters back: 10 tokens, the budget
        assert first.transmitted and first.text == "Here is my forty-character reply to you."
        generated = model.calls.count("respond")
        skipped, second = await pilot.say("Still there?")
        assert not second.transmitted
        assert second.reason == (
            "no reply: the reply budget of 10 tokens per 24 hours on test:room is used (10); replies "
            "resume as the window moves on"
        )
        assert model.calls.count("respond") == generated  # nothing was generated for it
        assert channel.notices[-1].text == second.reason  # visible where the message came from
        trace = (await pilot.store.deliberation_traces(ADA.id, [skipped.id]))[0].trace
        assert trace["decision"] == {
            "action": "silent",
            "reason": second.reason,
            "message": None,
            "redirect_to": None,
        }
        # Another channel has its own budget; and the window moves on.
        _, elsewhere = await pilot.say("Hi from the lobby.", channel="lobby")
        assert elsewhere.transmitted
        pilot.advance(timedelta(hours=24))
        _, later = await pilot.say("A day later?")
        assert later.transmitted
