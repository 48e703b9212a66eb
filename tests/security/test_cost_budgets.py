"""Issue 13 item 9: budgets bound a run while it goes, and replies have a budget too.

- The autonomy budget was checked only before a run started: one beat's tool loop spent
  459,000 tokens against a 200,000-token daily budget. It is now checked before every model
  call a self-initiated run makes, and the run stops cleanly, saying why.
- The per-channel rolling budget of generated tokens (SPEC §4.5, the primary defence against
  two agents talking forever) held only for `message_contact`; replies spend it too now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _cost_support import AGENT, idle, say, start_runtime
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.core.clock import ManualClock
from persyn.gateway.base import TokenUsage
from persyn.runtime.autonomy import recent_activity
from persyn.testing.models import DoubleReply, registered_double

CALL = TokenUsage(input_tokens=40, output_tokens=10)  # every model call costs 50 tokens


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
    runtime, channel, adapter = await start_runtime(
        tmp_path, "costbudget", "[autonomy]\ndaily_token_budget = 300\n[tools]\nmax_round_trips = 50\n"
    )
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    model.counting = True
    try:
        clock.advance(timedelta(hours=1))
        assert await runtime.autonomy.fire_due() == 1  # the heartbeat
        for _ in range(400):
            if await recent_activity(runtime.store, AGENT.id):
                break
            await asyncio.sleep(0.05)
        (entry,) = await recent_activity(runtime.store, AGENT.id)
        assert entry.kind == "heartbeat"
        assert entry.outcome == (
            "stopped: the autonomy budget of 300 tokens per 24 hours is used (300); this run makes no "
            "more model calls"
        )
        assert entry.tokens == 300  # six calls: never more than the budget plus one call
        assert runtime.meter.flush()
        metered = [r for r in adapter.records if r.thread_id == entry.id]
        assert sum(r.input_tokens + r.output_tokens for r in metered) == 300
        assert [r.stage for r in metered] == ["heartbeat:assess"] + ["respond"] * 5
        assert channel.delivered == []  # a stopped run says nothing
        # The next beat is skipped before it starts: the window's budget is used.
        await idle(runtime)
        clock.advance(timedelta(hours=1))
        assert await runtime.autonomy.fire_due() == 1
        latest = (await recent_activity(runtime.store, AGENT.id))[0]
        assert latest.outcome.startswith(
            "skipped: the autonomy budget of 300 tokens per 24 hours is used (300)"
        )
    finally:
        await runtime.stop()


async def test_a_channel_over_its_reply_budget_gets_no_generated_reply(tmp_path: Path, model: Model) -> None:
    runtime, channel, _ = await start_runtime(
        tmp_path, "costbudget", "[autonomy]\nchannel_reply_tokens = 10\n"
    )
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    try:
        _, first = await say(runtime, "Hello there!")  # 40 characters back: 10 tokens, the budget
        assert first.transmitted and first.text == "Here is my forty-character reply to you."
        generated = model.calls.count("respond")
        skipped, second = await say(runtime, "Still there?")
        assert not second.transmitted
        assert second.reason == (
            "no reply: the reply budget of 10 tokens per 24 hours on test:room is used (10); replies "
            "resume as the window moves on"
        )
        assert model.calls.count("respond") == generated  # nothing was generated for it
        assert channel.notices[-1] == second.reason  # visible where the message came from
        trace = (await runtime.store.deliberation_traces(AGENT.id, [skipped.id]))[0].trace
        assert trace["decision"] == {
            "action": "silent",
            "reason": second.reason,
            "message": None,
            "redirect_to": None,
        }
        # Another channel has its own budget; and the window moves on.
        _, elsewhere = await say(runtime, "Hi from the lobby.", channel="lobby")
        assert elsewhere.transmitted
        clock.advance(timedelta(hours=24))
        _, later = await say(runtime, "A day later?")
        assert later.transmitted
    finally:
        await runtime.stop()
