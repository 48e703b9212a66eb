"""Ambient attribution (SPEC App. C): bound once per activation, read by the gateway.

Background work started from an activation inherits it (contextvars are copied into new
tasks); work that runs elsewhere re-binds it explicitly with `bind(...)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

__all__ = ["Attribution", "bind", "current", "rebind"]


@dataclass(frozen=True)
class Attribution:
    agent_id: str | None = None
    surface: str | None = None
    channel: str | None = None
    thread_id: str | None = None
    conversation_id: str | None = None
    # Set by the durable runtime around each step: makes usage ids stable across a replay.
    step_key: str | None = None
    # Set with it: one execution of the step (a re-run gets a new one), so what counts the
    # model calls of an execution counts them across the nested rebinds inside the step.
    step_run: str | None = None
    # What set the work going (`UsageRecord.trigger`): bound with the activation or job.
    trigger: str | None = None


# Attribution is a frozen dataclass, so sharing one default instance is safe.
_current: ContextVar[Attribution] = ContextVar("persyn_attribution", default=Attribution())  # noqa: B039


def current() -> Attribution:
    return _current.get()


@contextmanager
def bind(attribution: Attribution) -> Iterator[Attribution]:
    token = _current.set(attribution)
    try:
        yield attribution
    finally:
        _current.reset(token)


@contextmanager
def rebind(**changes: str | None) -> Iterator[Attribution]:
    """Bind the current attribution with some fields changed (e.g. the conversation once
    it is resolved)."""
    with bind(replace(_current.get(), **changes)) as attribution:
        yield attribution
