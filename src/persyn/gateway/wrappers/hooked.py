"""Acting before and after each call: the base of the checkpoints, the autonomy budget and the
per-model provider tools."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestParameters

from persyn.gateway.wrappers.base import Call, Reply, RoundTripModel

__all__ = ["CallHooks", "HookedModel"]


@dataclass
class CallHooks:
    """What a `HookedModel` does about one call: the parameters to send, a stored response to
    answer with instead of calling (`replay`), a context the call runs in, and an awaitable
    step told the response once the call returned (a stream: once drained and closed)."""

    params: ModelRequestParameters
    replay: ModelResponse | None = None
    context: AbstractContextManager[Any] = field(default_factory=nullcontext)
    after: Callable[[ModelResponse], Awaitable[None]] | None = None


class HookedModel(RoundTripModel, ABC):
    """A wrapper that acts before and after each call: `_hooks` says what to do (`CallHooks`)."""

    @abstractmethod
    async def _hooks(self, messages: list[ModelMessage], params: ModelRequestParameters) -> CallHooks: ...

    @asynccontextmanager
    async def _round_trip(self, call: Call[Reply]) -> AsyncGenerator[Reply]:
        hooks = await self._hooks(call.messages, call.params)
        if hooks.replay is not None:  # a stream gets it as one piece
            yield call.answered(hooks.replay)
            return
        with hooks.context:
            async with call.to(self.wrapped, hooks.params) as reply:
                yield reply
        if hooks.after is not None:  # closed and drained: the response is final (and metered)
            await hooks.after(call.response(reply))
