"""Durable execution on DBOS (ARCHITECTURE §3).

One activation = one workflow, whose id is the event id (a fresh ULID per event), so a
redelivered event never runs twice. Each model call and the transmit are steps: a worker
killed between them resumes after the last finished step, without re-billing a model call
or transmitting twice. Workflows reach the live composition root through `runtime()`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from dbos import DBOS

from persyn.usage.context import Attribution, bind, rebind

if TYPE_CHECKING:
    from persyn.runtime.app import Runtime

__all__ = ["BACKGROUND_QUEUE", "EVENTS_QUEUE", "activation", "conversation_closed", "install", "runtime"]

EVENTS_QUEUE = "persyn-events"
BACKGROUND_QUEUE = "persyn-background"

_runtime: Runtime | None = None


def install(rt: Runtime | None) -> None:
    global _runtime
    _runtime = rt


def runtime() -> Runtime:
    if _runtime is None:
        raise RuntimeError("the Persyn runtime is not started in this process")
    return _runtime


def _step_key() -> str:
    return f"{DBOS.workflow_id}:{DBOS.step_id}"


@DBOS.step(name="persyn.receive")
async def receive_step(agent_id: str, event_id: str) -> dict[str, Any]:
    return await runtime().receive(agent_id, event_id)


@DBOS.step(name="persyn.respond")
async def respond_step(agent_id: str, event_id: str, setup: dict[str, Any]) -> dict[str, Any]:
    with rebind(step_key=_step_key()):
        return await runtime().respond(agent_id, event_id, setup)


@DBOS.step(name="persyn.transmit")
async def transmit_step(
    agent_id: str, event_id: str, setup: dict[str, Any], reply: dict[str, Any]
) -> dict[str, Any]:
    return await runtime().transmit(agent_id, event_id, setup, reply)


@DBOS.workflow(name="persyn.activation")
async def activation(agent_id: str, event_id: str) -> dict[str, Any]:
    """receive → respond → transmit for one event (SPEC §4)."""
    rt = runtime()
    with bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id)):
        setup = await receive_step(agent_id, event_id)
        with rebind(
            surface=setup["service"], channel=setup["channel"], conversation_id=setup["conversation_id"]
        ):
            reply = await respond_step(agent_id, event_id, setup)
            delay = rt.settings.dispatch.debug_transmit_delay_seconds
            if delay:
                await asyncio.sleep(delay)
            return await transmit_step(agent_id, event_id, setup, reply)


@DBOS.step(name="persyn.conversation_hook")
async def conversation_hook_step(agent_id: str, conversation_id: str, hook_name: str) -> None:
    with rebind(step_key=_step_key()):
        await runtime().run_conversation_hook(agent_id, conversation_id, hook_name)


@DBOS.workflow(name="persyn.conversation_closed")
async def conversation_closed(agent_id: str, conversation_id: str) -> None:
    """Runs on the background queue after a conversation closes: each registered hook
    (consolidation, later) is a durable step, so a crash between close and hook loses
    nothing."""
    with bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id, conversation_id=conversation_id)):
        for hook_name in runtime().conversation_hook_names():
            await conversation_hook_step(agent_id, conversation_id, hook_name)
