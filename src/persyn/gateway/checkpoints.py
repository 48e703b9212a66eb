"""Completed model calls checkpointed inside a durable step (ARCHITECTURE §4, §8).

DBOS checkpoints a step's output when the step ends, so a step re-run after a crash repeats
everything it did, model calls included: each call is billed again. `CheckpointedModel`
makes a step that spans several model calls safe to re-run. Inside a durable step (the
attribution has a `step_key`), every call gets a key from the step's identity and the
call's index in that execution of the step (`step_run`, bound by `durable_step`): the n-th call
of a step is the n-th call of its re-run, because a step re-run makes the same calls in the
same order up to the point where the first run stopped (its inputs, and the responses read
back here, are the same). Before calling, the wrapper looks the key up in the store; a
stored response is returned as it was (streamed as one piece when a stream was asked for)
and nothing is called, metered or charged. After a call completes, its response is queued
for writing under its key, before anything the step writes later (`save_model_call`).
Once a lookup has found nothing, the later calls of that sequence (same step key, same
execution) are not looked up: from that call on the execution is not repeating the first
run (the calls it makes now may answer differently, so what follows is asked differently),
and a first run — nearly every execution — makes one lookup per sequence, not one per call.

It wraps a task's whole model, outside the fallback chain, the metering and whatever the
composition root adds (the autonomy budget), so a replayed call bypasses all of them: the
first run metered and charged it. A call inside a step is metered under its own call key,
so the usage records of a re-run's new calls never share a call id with a replayed one.

Fail soft: a lookup or a write that fails is logged and the call goes on as if nothing were
stored (a re-run then calls again, as it would without checkpoints). Outside a durable
step (`step_key` None) calls pass straight through.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from datetime import datetime
from typing import Any, Protocol

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters

from persyn.core.clock import Clock
from persyn.gateway.wrappers import CallHooks, HookedModel
from persyn.usage import context as usage_context

__all__ = ["CallCheckpoints", "CheckpointedModel", "StepCalls", "call_key"]

log = logging.getLogger(__name__)

_COUNTERS = 4096  # step executions remembered for call indexes


class CallCheckpoints(Protocol):
    """Where completed calls are kept (the store's model-calls sub-port)."""

    def model_call(self, call_key: str) -> Awaitable[str | None]: ...

    def save_model_call(
        self, call_key: str, workflow_id: str, response: str, at: datetime
    ) -> Awaitable[Any]: ...


def call_key(step_key: str, index: int) -> str:
    """The key of the `index`-th model call (from 0) of the step execution `step_key`."""
    return f"{step_key}/{index}"


class StepCalls:
    """Counts the model calls of each running step execution. One is shared by every model
    a runtime builds: a step may call several tasks' models (a draft, then a decision), and
    their calls are numbered in one sequence."""

    def __init__(self) -> None:
        # execution -> [calls so far, whether a lookup of one of them found nothing]
        self._calls: OrderedDict[tuple[str, str | None], list[int]] = OrderedDict()

    def next_key(self) -> str | None:
        """The key of the call about to be made (None: not in a durable step). An execution
        is its `step_key` and `step_run`, which the nested rebinds inside a step keep; a
        re-run has a new `step_run`, so its count starts again at 0."""
        attribution = usage_context.current()
        if attribution.step_key is None:
            return None
        execution = (attribution.step_key, attribution.step_run)
        counted = self._calls.setdefault(execution, [0, 0])
        index = counted[0]
        counted[0] = index + 1
        self._calls.move_to_end(execution)
        while len(self._calls) > _COUNTERS:
            self._calls.popitem(last=False)
        return call_key(attribution.step_key, index)

    def past_a_miss(self) -> bool:
        """Whether a lookup in the current execution's sequence found nothing already."""
        attribution = usage_context.current()
        counted = self._calls.get((attribution.step_key or "", attribution.step_run))
        return counted is not None and bool(counted[1])

    def missed(self) -> None:
        """A lookup in the current execution's sequence found nothing."""
        attribution = usage_context.current()
        counted = self._calls.get((attribution.step_key or "", attribution.step_run))
        if counted is not None:
            counted[1] = 1


class CheckpointedModel(HookedModel):
    """A task's model whose completed calls inside a durable step are stored and replayed
    (module docstring)."""

    def __init__(
        self, wrapped: Model, *, checkpoints: CallCheckpoints, calls: StepCalls, clock: Clock
    ) -> None:
        super().__init__(wrapped)
        self._checkpoints = checkpoints
        self._calls = calls
        self._clock = clock
        self._saving: set[asyncio.Future[Any]] = set()

    async def _hooks(self, messages: list[ModelMessage], params: ModelRequestParameters) -> CallHooks:
        key = self._calls.next_key()
        if key is None:
            return CallHooks(params)
        stored = None if self._calls.past_a_miss() else await self._stored(key)
        if stored is not None:
            return CallHooks(params, replay=stored)
        self._calls.missed()

        async def save(response: ModelResponse) -> None:
            self._save(key, response)

        return CallHooks(params, context=usage_context.rebind(step_key=key), after=save)

    async def _stored(self, key: str) -> ModelResponse | None:
        try:
            raw = await self._checkpoints.model_call(key)
            if raw is None:
                return None
            return _as_response(raw)
        except Exception:
            log.warning("could not read the model call checkpointed as %s; calling again", key, exc_info=True)
            return None

    def _save(self, key: str, response: ModelResponse) -> None:
        """Queue the checkpoint (the store writes it before anything the step writes later);
        the call does not wait for the disk."""
        workflow_id = key.split(":", 1)[0]
        try:
            raw = ModelMessagesTypeAdapter.dump_json([response]).decode()
            saving = asyncio.ensure_future(
                self._checkpoints.save_model_call(key, workflow_id, raw, self._clock.now())
            )
        except Exception:
            log.warning("could not checkpoint the model call %s", key, exc_info=True)
            return
        self._saving.add(saving)
        saving.add_done_callback(self._saved)

    def _saved(self, saving: asyncio.Future[Any]) -> None:
        self._saving.discard(saving)
        if not saving.cancelled() and saving.exception() is not None:
            log.warning("could not checkpoint a model call: %s", saving.exception())


def _as_response(raw: str) -> ModelResponse:
    messages = ModelMessagesTypeAdapter.validate_json(raw)
    if len(messages) != 1 or not isinstance(messages[0], ModelResponse):
        raise ValueError(f"a stored model call is not one response: {raw[:200]!r}")
    return messages[0]
