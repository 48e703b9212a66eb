"""What the tests and the benchmark of agents talking to agents (SPEC §4.5) share: a second
agent, a model double that always has something new to say, and a ticker that moves a
`ManualClock` on so the pacing's intervals and backoffs pass in milliseconds (used by
`tests/unit/runtime/test_agent_pacing.py`, `tests/unit/channels/test_irc*.py` and
`bench/agents.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from datetime import timedelta

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.testing.harness import START
from persyn.testing.models import DoubleFunction, DoubleReply, DoubleResult, minimal_instance, output_schema

__all__ = ["BOB", "chatty", "ticking"]

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
