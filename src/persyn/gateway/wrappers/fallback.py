"""A task's chain of models, each tried in turn: the last of the wrappers every model call
goes through (`gateway/wrappers/__init__.py` lists them all, innermost first)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

from pydantic_ai.models import Model

from persyn.core.errors import ModelError, ModelUnavailableError
from persyn.gateway.wrappers.base import Call, Reply, RoundTripModel

__all__ = ["FallbackModel"]

log = logging.getLogger(__name__)


class FallbackModel(RoundTripModel):
    """A task's chain of models: each is tried in turn until one answers; when every one has
    failed, the error names each failure. Only a `ModelError` (a model that failed after its
    retries) moves on to the next; the chain presents itself as its first model (name,
    profile), which is also the one a caller configured first.

    A stream moves on only while it opens, for the reason `RetryingModel` gives."""

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise ValueError("a fallback chain needs at least one model")
        super().__init__(models[0])
        self.models = list(models)

    @asynccontextmanager
    async def _round_trip(self, call: Call[Reply]) -> AsyncGenerator[Reply]:
        failures: list[ModelError] = []
        for model in self.models:
            async with AsyncExitStack() as stack:
                try:
                    reply = await stack.enter_async_context(call.to(model))
                except ModelError as exc:
                    self._moving_on(exc, failures)
                    continue
                yield reply
                return
        raise _exhausted(failures)

    def _moving_on(self, exc: ModelError, failures: list[ModelError]) -> None:
        failures.append(exc)
        if len(failures) < len(self.models):
            log.warning("%s; trying the next model of the chain", exc)


def _exhausted(failures: Sequence[ModelError]) -> ModelError:
    text = "every model of the chain failed: " + "; ".join(str(failure) for failure in failures)
    if all(isinstance(failure, ModelUnavailableError) for failure in failures):
        return ModelUnavailableError(text)
    return ModelError(text)
