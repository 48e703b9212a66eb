"""Typed durable steps: one decorator instead of a checkpoint convention in every step.

`durable_step(name)` makes an async method a DBOS step that
- binds the usage attribution's `step_key` to the step's identity (workflow id and position),
  which is what a re-run of this very step shares with its first run: usage ids, the per-run
  caps and the gateway's checkpoints of the step's model calls are keyed by it; and its
  `step_run` to this execution, which a re-run does not share (the gateway counts an
  execution's calls by it);
- dumps the typed result (a frozen model, a tuple of them, a string, None: whatever the
  method's return annotation says) to plain JSON inside the step, which is what DBOS
  checkpoints, and validates it back into the annotated type outside, so the workflow reads
  typed fields whether the step ran now or its output was replayed from the checkpoint.

`durable_workflow(name)` does the same for a workflow's own result: the body returns its
typed model, DBOS records its JSON, and `workflow_result(name, output)` validates a
recorded output back (a handle's `get_result()` gives the JSON).

A checkpoint therefore never depends on a Python class: it is the step protocol. The DBOS
application version is `APPLICATION_VERSION`, derived from `STEP_PROTOCOL_VERSION`, not from
a hash of the code (DBOS's default), so a build that changes code but not what the steps and
workflows exchange recovers the workflows an older build left pending. Bump the protocol
version when a workflow's inputs, a step's output shape, or the order of a workflow's steps
change incompatibly; executors then leave the older version's pending workflows alone (DBOS
recovers and dequeues only its own version), so drain the queues before such an upgrade.
"""

from __future__ import annotations

import functools
import typing
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from dbos import DBOS
from pydantic import TypeAdapter

from persyn.usage.context import rebind

__all__ = [
    "APPLICATION_VERSION",
    "STEP_PROTOCOL_VERSION",
    "durable_step",
    "durable_workflow",
    "step_key",
    "step_output_types",
    "workflow_result",
]

# 2: the deferred turn's decision is made on the input inside `persyn.receive_respond`
# (`Received.decision`), so its workflow has no `persyn.decide` step any more.
# 3: `persyn.turn` (`Turned`) replaces `persyn.receive_respond` and, on the common path, holds
# the decision on the draft and the transmit too (the gateway checkpoints its model calls).
STEP_PROTOCOL_VERSION = 3
APPLICATION_VERSION = f"persyn-steps-{STEP_PROTOCOL_VERSION}"

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")

_OUTPUTS: dict[str, TypeAdapter[Any]] = {}
_WORKFLOW_OUTPUTS: dict[str, TypeAdapter[Any]] = {}


def step_key() -> str:
    """The running step's identity: its workflow and its position in it."""
    return f"{DBOS.workflow_id}:{DBOS.step_id}"


def step_output_types() -> dict[str, TypeAdapter[Any]]:
    """Each durable step's name and the type its checkpoint validates as."""
    return dict(_OUTPUTS)


def durable_step(
    name: str, *, bind_key: bool = True
) -> Callable[[Callable[Concatenate[S, P], Awaitable[R]]], Callable[Concatenate[S, P], Awaitable[R]]]:
    """A DBOS step named `name` whose output is checkpointed as JSON (module docstring).
    `bind_key=False` for a step that passes its identity on itself instead (a tool call)."""

    def decorate(
        method: Callable[Concatenate[S, P], Awaitable[R]],
    ) -> Callable[Concatenate[S, P], Awaitable[R]]:
        returns = typing.get_type_hints(method)["return"]
        adapter: TypeAdapter[R] = TypeAdapter(returns)
        _OUTPUTS[name] = adapter

        @DBOS.step(name=name)
        async def checkpointed(self: S, *args: P.args, **kwargs: P.kwargs) -> Any:
            if not bind_key:
                return adapter.dump_python(await method(self, *args, **kwargs), mode="json")
            with rebind(step_key=step_key(), step_run=uuid.uuid4().hex):
                return adapter.dump_python(await method(self, *args, **kwargs), mode="json")

        @functools.wraps(method)
        async def step(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
            return adapter.validate_python(await checkpointed(self, *args, **kwargs))

        return step

    return decorate


def durable_workflow(
    name: str,
) -> Callable[[Callable[Concatenate[S, P], Awaitable[object]]], Callable[Concatenate[S, P], Awaitable[Any]]]:
    """A DBOS workflow named `name` whose typed result is recorded as JSON (module docstring).
    DBOS calls the returned function; read a recorded output with `workflow_result`."""

    def decorate(
        method: Callable[Concatenate[S, P], Awaitable[object]],
    ) -> Callable[Concatenate[S, P], Awaitable[Any]]:
        adapter: TypeAdapter[object] = TypeAdapter(typing.get_type_hints(method)["return"])
        _WORKFLOW_OUTPUTS[name] = adapter

        @functools.wraps(method)
        async def recorded(self: S, *args: P.args, **kwargs: P.kwargs) -> Any:
            return adapter.dump_python(await method(self, *args, **kwargs), mode="json")

        return DBOS.workflow(name=name)(recorded)

    return decorate


def workflow_result(name: str, output: Any) -> Any:
    """A recorded output of the durable workflow `name`, validated as its typed result."""
    return _WORKFLOW_OUTPUTS[name].validate_python(output)
