"""What the tests and the benchmark of agents talking to agents (SPEC §4.5) share: a second
agent, a model double that always has something new to say, and a ticker that moves a
`ManualClock` on so the pacing's intervals and backoffs pass in milliseconds (used by
`tests/unit/runtime/test_agent_pacing.py`, `tests/unit/channels/test_irc*.py` and
`bench/agents.py`), and the double of an agent in a chat room (`room_listener`, used by the
IRC and Matrix tests)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.testing.harness import START
from persyn.testing.models import (
    DoubleFunction,
    DoubleReply,
    DoubleResult,
    echo_text,
    last_user_text,
    minimal_instance,
    output_schema,
)

__all__ = ["BOB", "chatty", "room_listener", "ticking"]

# The other agent of a two-agent deployment (ADA is the harness's first): its id sorts after hers.
BOB = AgentConfig(name="Bob", id=new_id(START + timedelta(milliseconds=1)))


def chatty(word: str, *, words: int = 6, lead: str = "") -> DoubleFunction:
    """A double that joins every conversation and always says something new (so no redundancy
    gate stops it): `lead` (with `{n}`, the reply's number) and `words` words made of `word`.
    Structured calls (critique, summaries) get their smallest valid answer."""
    turns = itertools.count()

    def double(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        if task == "decide":
            return {"action": "speak", "reason": "I have more to add"}
        schema = output_schema(info)
        if schema is not None:
            return DoubleReply(output=minimal_instance(schema))
        n = next(turns)
        return lead.format(n=n) + " ".join(f"{word}{n}w{k}" for k in range(words)) + "?"

    return double


@contextlib.asynccontextmanager
async def ticking(
    clock: ManualClock, step: timedelta = timedelta(seconds=5), every: float = 0.002
) -> AsyncIterator[None]:
    """Time passes: the moved clock runs on by `step` every `every` seconds, so what waits on
    it (pacing holds, backoff) ends, and messages said one after another are stamped in order.
    Nothing may depend on the rate."""

    async def tick() -> None:
        while True:
            clock.advance(step)
            await asyncio.sleep(every)

    task = asyncio.ensure_future(tick())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def room_listener(*, long_reply: str, redirect_to: Callable[[str], str]) -> DoubleFunction:
    """An agent in a room: answers what it is asked (the echo), stays out of other people's
    small talk, moves a draft that says "privately" to `redirect_to(draft)`, and answers
    "... tell me everything" with `long_reply`."""

    def double(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        if task == "decide":
            asked = last_user_text(messages)
            if "overhearing" in asked and "Should you join in?" in asked:
                return {
                    "action": "silent",
                    "reason": "others are chatting among themselves; I have nothing to add",
                }
            draft = asked.rpartition("Your draft reply:")[2]
            if "Do you send it?" in asked and "privately" in draft:
                return {
                    "action": "redirect",
                    "reason": "better said in private",
                    "redirect_to": redirect_to(draft),
                }
            return {"action": "speak", "reason": "I was asked"}
        if last_user_text(messages).endswith("tell me everything"):
            return long_reply
        schema = output_schema(info)
        if schema is not None:  # critique and the like: nothing to object to
            return DoubleReply(output=minimal_instance(schema))
        return echo_text(messages)

    return double
