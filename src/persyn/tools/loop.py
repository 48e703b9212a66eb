"""The tool loop of the respond step (SPEC §4.6): ask the model, run the tools it calls,
feed the results back, until it answers in words — within the loop breakers.

The loop knows nothing of the gateway or of durability: it is given `complete` (one model
round-trip for a prompt; the runtime passes the gateway call, wrapped as a durable step and
metered) and optionally `run_call` (one tool call; default `registry.call`, which the
runtime may wrap as a durable step too). The breaker is consulted *outside* `run_call`, so a
workflow that replays its recorded steps after a crash counts calls the same way again.

Tools are offered on every round-trip, even after a breaker trips: the definitions are the
cacheable head of the prompt, and some providers refuse a history with tool calls but no
tools. A model that goes on calling tools after the round-trip limit gets its calls refused
once; if it still calls tools, the loop ends there (`stopped`), so one activation makes at
most `max_round_trips + 2` model calls. A failing model call (`ModelError`) propagates: the
caller degrades to its safe fallback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from persyn.gateway.base import AgentTurn, Completion, Prompt, PromptItem, TokenUsage, ToolCall, ToolSpec
from persyn.tools.breaker import BreakerTrip, LoopBreaker
from persyn.tools.registry import ToolOutcome, ToolRegistry

__all__ = ["CompleteFn", "RunCallFn", "ToolLoopResult", "run_tool_loop"]

CompleteFn = Callable[[Prompt, Sequence[ToolSpec]], Awaitable[Completion]]
RunCallFn = Callable[[ToolCall], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class ToolLoopResult:
    """How a tool loop ended. `completion` is the last model reply (its text is the answer);
    `items` are the turns the loop added after the prompt's own (agent turns with tool calls,
    tool results), in order; `usage` sums every round-trip."""

    completion: Completion
    items: tuple[PromptItem, ...]
    outcomes: tuple[ToolOutcome, ...]
    trips: tuple[BreakerTrip, ...]
    model_calls: int
    usage: TokenUsage
    stopped: bool = False  # True: the model kept calling tools past every limit

    @property
    def text(self) -> str:
        return self.completion.text


async def run_tool_loop(
    prompt: Prompt,
    registry: ToolRegistry,
    complete: CompleteFn,
    *,
    breaker: LoopBreaker | None = None,
    run_call: RunCallFn | None = None,
) -> ToolLoopResult:
    """Run the loop for one activation (see the module note)."""
    breaker = breaker or registry.breaker()
    run = run_call or registry.call
    tools = registry.specs()
    added: list[PromptItem] = []
    outcomes: list[ToolOutcome] = []
    usage = TokenUsage()
    model_calls = 0
    while True:
        completion = await complete(prompt.model_copy(update={"items": (*prompt.items, *added)}), tools)
        model_calls += 1
        usage = _add(usage, completion.usage)
        if not completion.tool_calls:
            return _result(completion, added, outcomes, breaker, model_calls, usage)
        already_stopped = any(trip.reason == "max_round_trips" for trip in breaker.trips)
        trip = breaker.begin_round_trip()
        if trip is not None and already_stopped:
            return _result(completion, added, outcomes, breaker, model_calls, usage, stopped=True)
        added.append(AgentTurn(text=completion.text, tool_calls=completion.tool_calls))
        if trip is not None:
            round_outcomes = registry.refuse(completion.tool_calls, trip)
        else:
            round_outcomes = []
            for call in completion.tool_calls:
                repeated = breaker.admit(call)
                if repeated is not None:
                    round_outcomes += registry.refuse([call], repeated)
                else:
                    round_outcomes.append(await run(call))
        outcomes += round_outcomes
        added += [outcome.as_result() for outcome in round_outcomes]


def _result(
    completion: Completion,
    added: list[PromptItem],
    outcomes: list[ToolOutcome],
    breaker: LoopBreaker,
    model_calls: int,
    usage: TokenUsage,
    *,
    stopped: bool = False,
) -> ToolLoopResult:
    return ToolLoopResult(
        completion=completion,
        items=tuple(added),
        outcomes=tuple(outcomes),
        trips=breaker.trips,
        model_calls=model_calls,
        usage=usage,
        stopped=stopped,
    )


def _add(total: TokenUsage, more: TokenUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cache_read_tokens=total.cache_read_tokens + more.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens + more.cache_write_tokens,
    )
