"""Loop breakers for the tool loop (SPEC §4.6; issue 6): a model that keeps calling tools
must not spend without bound. Pure bookkeeping for one activation, no I/O:

- at most `max_round_trips` model replies that ask for tools are answered by running them;
- at most `max_calls_per_round` of the calls in one reply are run (forty calls in one reply, or
  ten catastrophic regular expressions, once held a turn for half a minute);
- a call with the same tool name and the same (canonical) arguments as `max_identical_calls`
  earlier calls is refused without running.

Each refusal is a `BreakerTrip`, kept in `trips` so the activation can record it, and carrying
the message the model is shown instead of a result.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config import ToolsConfig
from persyn.core.errors import ConfigError
from persyn.gateway.base import ToolCall

__all__ = ["BreakerTrip", "LoopBreaker", "canonical_arguments"]


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """The arguments as canonical JSON (sorted keys, no spaces): equal arguments give equal
    text whatever order the model wrote them in."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


class BreakerTrip(BaseModel):
    """A loop breaker stopping the tool loop: why, on which call, at which count."""

    model_config = ConfigDict(frozen=True)

    reason: Literal["max_round_trips", "max_calls_per_round", "repeated_call"]
    limit: int = Field(ge=1)
    count: int = Field(ge=1)  # the round-trip number, or how often this exact call was made
    tool: str | None = None  # the repeated call's tool (None for max_round_trips)
    arguments: str | None = None  # its canonical arguments
    message: str  # what the model is told instead of a result


class LoopBreaker:
    """Counts one activation's tool round-trips and calls; see the module note."""

    def __init__(
        self, *, max_round_trips: int, max_identical_calls: int, max_calls_per_round: int = 8
    ) -> None:
        if max_round_trips < 1:
            raise ConfigError(f"max_round_trips must be at least 1, got {max_round_trips!r}")
        if max_identical_calls < 1:
            raise ConfigError(f"max_identical_calls must be at least 1, got {max_identical_calls!r}")
        if max_calls_per_round < 1:
            raise ConfigError(f"max_calls_per_round must be at least 1, got {max_calls_per_round!r}")
        self.max_round_trips = max_round_trips
        self.max_identical_calls = max_identical_calls
        self.max_calls_per_round = max_calls_per_round
        self._round_trips = 0
        self._round_calls = 0  # calls admitted or refused in the current round-trip
        self._calls: Counter[tuple[str, str]] = Counter()
        self._trips: list[BreakerTrip] = []

    @classmethod
    def from_config(cls, config: ToolsConfig) -> LoopBreaker:
        return cls(
            max_round_trips=config.max_round_trips,
            max_identical_calls=config.max_identical_calls,
            max_calls_per_round=config.max_calls_per_round,
        )

    @property
    def round_trips(self) -> int:
        """Round-trips admitted so far."""
        return min(self._round_trips, self.max_round_trips)

    @property
    def trips(self) -> tuple[BreakerTrip, ...]:
        return tuple(self._trips)

    @property
    def tripped(self) -> bool:
        return bool(self._trips)

    @property
    def exhausted(self) -> bool:
        """No further round-trip will be admitted: offer the model no more tools."""
        return self._round_trips >= self.max_round_trips

    def begin_round_trip(self) -> BreakerTrip | None:
        """Call once per model reply that asks for tools, before running them. Returns the
        trip (and records it) when this reply is one too many: answer its calls with
        `ToolRegistry.refuse` instead of running them."""
        self._round_trips += 1
        self._round_calls = 0
        if self._round_trips <= self.max_round_trips:
            return None
        trip = BreakerTrip(
            reason="max_round_trips",
            limit=self.max_round_trips,
            count=self._round_trips,
            message=(
                f"Tool use stopped: this turn already used {self.max_round_trips} rounds of tool "
                "calls, the most allowed. Answer now with what you have, without calling tools."
            ),
        )
        self._trips.append(trip)
        return trip

    def admit(self, call: ToolCall) -> BreakerTrip | None:
        """Count `call`; return (and record) a trip if it is one call too many in its reply
        (past `max_calls_per_round`), or repeats an identical call more than
        `max_identical_calls` times in this activation."""
        arguments = canonical_arguments(call.args)
        self._round_calls += 1
        if self._round_calls > self.max_calls_per_round:
            trip = BreakerTrip(
                reason="max_calls_per_round",
                limit=self.max_calls_per_round,
                count=self._round_calls,
                tool=call.name,
                arguments=arguments,
                message=(
                    f"Not run: this reply asked for more than {self.max_calls_per_round} tool calls, "
                    f"the most run at once; only the first {self.max_calls_per_round} ran. Use their "
                    "results, and ask for fewer calls at a time."
                ),
            )
            self._trips.append(trip)
            return trip
        key = (call.name, arguments)
        self._calls[key] += 1
        count = self._calls[key]
        if count <= self.max_identical_calls:
            return None
        times = "once" if self.max_identical_calls == 1 else f"{self.max_identical_calls} times"
        trip = BreakerTrip(
            reason="repeated_call",
            limit=self.max_identical_calls,
            count=count,
            tool=call.name,
            arguments=arguments,
            message=(
                f"Not run: {call.name!r} was already called {times} with exactly these arguments "
                "in this turn; the result will not change. Use the earlier result, try something "
                "different, or answer."
            ),
        )
        self._trips.append(trip)
        return trip
