"""Durable execution on DBOS (ARCHITECTURE §3).

One activation = one workflow, whose id is the event id (a fresh ULID per event), so a
redelivered event never runs twice. Each model call and the transmit are steps: a worker
killed between them resumes after the last finished step, without re-billing a model call
or transmitting twice. Workflows reach the live composition root through `runtime()`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dbos import DBOS, SetWorkflowID

from persyn.core.ids import derived_id, id_time
from persyn.usage.context import Attribution, bind, rebind

if TYPE_CHECKING:
    from persyn.runtime.app import Runtime

# The decision recorded when no model was needed (app imports this module, not vice versa).
AUTO_SPEAK = "a plain answer to someone talking to me"

__all__ = [
    "BACKGROUND_QUEUE",
    "EVENTS_QUEUE",
    "activation",
    "consolidation_retry",
    "conversation_closed",
    "deliberation",
    "extract",
    "install",
    "runtime",
    "scheduler_tick",
]

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


@DBOS.step(name="persyn.receive_respond")
async def receive_respond_step(agent_id: str, event_id: str) -> dict[str, Any]:
    """receive, then (when the message is for the agent) respond, as one step: one
    checkpoint instead of two on the common path. Re-running it after a crash is safe, as
    re-running receive always was (the inbound message id is derived from the event)."""
    with rebind(step_key=_step_key()):
        return await runtime().receive_and_respond(agent_id, event_id)


@DBOS.step(name="persyn.engage")
async def engage_step(agent_id: str, event_id: str, setup: dict[str, Any]) -> dict[str, Any]:
    with rebind(step_key=_step_key()):
        return await runtime().engage(agent_id, event_id, setup)


@DBOS.step(name="persyn.respond")
async def respond_step(agent_id: str, event_id: str, setup: dict[str, Any]) -> dict[str, Any]:
    with rebind(step_key=_step_key()):
        return await runtime().respond(agent_id, event_id, setup)


@DBOS.step(name="persyn.critique")
async def critique_step(
    agent_id: str, event_id: str, setup: dict[str, Any], draft: dict[str, Any]
) -> list[dict[str, Any]]:
    with rebind(step_key=_step_key()):
        return await runtime().critique(agent_id, event_id, setup, draft)


@DBOS.step(name="persyn.refine")
async def refine_step(
    agent_id: str, event_id: str, draft: dict[str, Any], critiques: list[dict[str, Any]], live: bool
) -> str | None:
    with rebind(step_key=_step_key()):
        return await runtime().refine(agent_id, event_id, draft, critiques, live=live)


@DBOS.step(name="persyn.decide")
async def decide_step(agent_id: str, event_id: str, setup: dict[str, Any], text: str) -> dict[str, Any]:
    with rebind(step_key=_step_key()):
        return await runtime().decide(agent_id, event_id, setup, text)


@DBOS.step(name="persyn.transmit")
async def transmit_step(
    agent_id: str, event_id: str, setup: dict[str, Any], outcome: dict[str, Any]
) -> dict[str, Any]:
    return await runtime().transmit(agent_id, event_id, setup, outcome)


@DBOS.step(name="persyn.park")
async def park_step(
    agent_id: str,
    event_id: str,
    setup: dict[str, Any],
    draft: dict[str, Any],
    critiques: list[dict[str, Any]],
    revised: str | None,
) -> None:
    await runtime().park(agent_id, event_id, setup, draft, critiques, revised)


@DBOS.workflow(name="persyn.activation")
async def activation(agent_id: str, event_id: str) -> dict[str, Any]:
    """receive + respond (overheard: receive → engage → respond) → (critique → refine) → decide → transmit (SPEC §4).

    Overheard traffic first gets an engagement decision. Inline mode critiques and refines
    before deciding; deferred mode decides and transmits the draft, then hands critique and
    refinement to `deliberation` on the background queue, whose conclusion the next turn
    on the channel weaves in."""
    rt = runtime()
    _wake_when_done(rt, EVENTS_QUEUE)
    with bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id)):
        received = await receive_respond_step(agent_id, event_id)
        setup: dict[str, Any] = received["setup"]
        with rebind(
            surface=setup["service"], channel=setup["channel"], conversation_id=setup["conversation_id"]
        ):
            draft: dict[str, Any] | None = received["draft"]
            if setup.get("kind") == "heartbeat":  # assess first: rest, or act on it
                assessment = await assess_step(agent_id, event_id, setup)
                if assessment["intention"] == "rest":
                    rest = {"action": "silent", "reason": f"resting: {assessment['plan']}"}
                    result = await transmit_step(agent_id, event_id, setup, {"decision": rest})
                    await _finish_run(agent_id, event_id, setup, result)
                    return result
                draft = await respond_step(agent_id, event_id, setup)
            elif draft is None:  # overheard: decide whether to engage before any draft
                decision = await engage_step(agent_id, event_id, setup)
                if decision["action"] != "speak":
                    return await transmit_step(agent_id, event_id, setup, {"decision": decision})
                draft = await respond_step(agent_id, event_id, setup)
            if draft["reply"].get("tool_calls"):
                draft = await _tool_loop(agent_id, event_id, setup, draft)
            text: str | None = draft["reply"]["text"]
            if text is None:
                result = await transmit_step(agent_id, event_id, setup, {"draft": draft})
                await _finish_run(agent_id, event_id, setup, result)
                return result
            # A heartbeat's words go to no one: nothing to critique before "saying" them.
            critique = rt.should_critique(text, agent_id) and setup.get("kind") != "heartbeat"
            critiques: list[dict[str, Any]] = []
            final = text
            if critique and setup.get("mode") == "inline":
                critiques = await critique_step(agent_id, event_id, setup, draft)
                if any(c["objections"] for c in critiques):
                    final = await refine_step(agent_id, event_id, draft, critiques, True) or text
            if rt.needs_decision(setup, final):
                decision = await decide_step(agent_id, event_id, setup, final)
            else:
                decision = {"action": "speak", "reason": AUTO_SPEAK}
            delay = rt.settings.dispatch.debug_transmit_delay_seconds
            if delay:
                await asyncio.sleep(delay)
            result = await transmit_step(
                agent_id,
                event_id,
                setup,
                {"draft": draft, "text": final, "decision": decision, "critiques": critiques},
            )
            # Only a draft that was actually said is worth reconsidering (not one replaced by
            # a refusal, nor one kept back).
            if critique and setup.get("mode") == "deferred" and result.get("action") in ("speak", "redirect"):
                await _defer(agent_id, event_id, setup, draft)
            await _extract_if_due(agent_id, event_id, setup, result)
            await _finish_run(agent_id, event_id, setup, result)
            return result


def _wake_when_done(rt: Runtime, queue_name: str) -> None:
    """Count this activation as running here (woken polls batch while any is) and, when
    its task ends (DBOS has recorded its outcome and released its slot), wake the queue: the
    agent's next event, held back by the per-agent partition lock, can start now instead of
    at the next poll."""
    task = asyncio.current_task()
    if task is None:
        return
    rt.running_activations += 1

    def done(_task: object) -> None:
        rt.running_activations -= 1
        rt.wake_queue(queue_name)

    task.add_done_callback(done)


async def _defer(agent_id: str, event_id: str, setup: dict[str, Any], draft: dict[str, Any]) -> None:
    queue = runtime().queue(BACKGROUND_QUEUE)
    # A ULID derived from the event: a replayed activation enqueues the same workflow.
    with SetWorkflowID(derived_id(id_time(event_id), event_id, "deliberation")):
        await queue.enqueue_async(deliberation, agent_id, event_id, setup, draft)
    runtime().wake_queue(BACKGROUND_QUEUE)


@DBOS.workflow(name="persyn.deliberation")
async def deliberation(agent_id: str, event_id: str, setup: dict[str, Any], draft: dict[str, Any]) -> None:
    """Deferred critique + refinement of a reply already sent; attributed to its conversation."""
    with bind(
        Attribution(
            agent_id=agent_id,
            thread_id=DBOS.workflow_id,
            surface=setup["service"],
            channel=setup["channel"],
            conversation_id=setup["conversation_id"],
        )
    ):
        critiques = await critique_step(agent_id, event_id, setup, draft)
        revised = None
        if any(c["objections"] for c in critiques):
            revised = await refine_step(agent_id, event_id, draft, critiques, True)
        await park_step(agent_id, event_id, setup, draft, critiques, revised)


@DBOS.step(name="persyn.respond_more")
async def respond_more_step(
    agent_id: str, event_id: str, setup: dict[str, Any], prompt: dict[str, Any]
) -> dict[str, Any]:
    with rebind(step_key=_step_key()):
        return await runtime().continue_respond(agent_id, event_id, setup, prompt)


@DBOS.step(name="persyn.tool_call")
async def tool_call_step(
    agent_id: str, event_id: str, setup: dict[str, Any], call: dict[str, Any]
) -> dict[str, Any]:
    # The step's identity (workflow and position) is what a re-run of this very call shares
    # with its first run, and what no other call has: the per-run caps count by it.
    return await runtime().run_tool(agent_id, event_id, setup, call, call_key=_step_key())


async def _tool_loop(
    agent_id: str, event_id: str, setup: dict[str, Any], draft: dict[str, Any]
) -> dict[str, Any]:
    """The respond step asked for tools: run the loop here, in the workflow, so every model
    round-trip and every tool call is its own durable step (a crash resumes after the last
    one, never re-running a tool or re-billing a call), with the loop breakers counted
    deterministically outside the steps. Returns the draft with the final answer; the
    tools used and any breaker trips go into it for the deliberation trace."""
    from persyn.cognition.pipeline import TurnSetup
    from persyn.gateway.base import Completion, Prompt, ToolCall
    from persyn.tools.loop import run_tool_loop
    from persyn.tools.registry import ToolOutcome

    registry = runtime().tool_registry(TurnSetup.model_validate(setup), event_id)
    reply = draft["reply"]
    first: list[Completion] = [
        Completion(
            text=reply["text"] or "",
            tool_calls=tuple(ToolCall.model_validate(c) for c in reply["tool_calls"]),
        )
    ]
    failure: list[str] = []

    async def complete(prompt: Prompt, tools: Any) -> Completion:
        if first:
            return first.pop()
        data = await respond_more_step(agent_id, event_id, setup, prompt.model_dump(mode="json"))
        if data.get("failure"):
            failure.append(str(data["failure"]))
        return Completion(
            text=str(data.get("text") or ""),
            tool_calls=tuple(ToolCall.model_validate(c) for c in data.get("tool_calls") or []),
        )

    async def run_call(call: ToolCall) -> ToolOutcome:
        return ToolOutcome.model_validate(
            await tool_call_step(agent_id, event_id, setup, call.model_dump(mode="json"))
        )

    prompt = Prompt.model_validate(draft["prepared"]["prompt"])
    result = await run_tool_loop(prompt, registry, complete, run_call=run_call)
    text = result.text.strip()
    if not text:  # the safe fallback: say what was done rather than nothing
        done = ", ".join(dict.fromkeys(o.name for o in result.outcomes if o.ok)) or "nothing"
        text = (
            f"(I used {done}, but could not put an answer into words{': ' + failure[0] if failure else ''}.)"
        )
    tools_used = [{"name": o.name, "status": o.status.value} for o in result.outcomes]
    trips = [t.model_dump(mode="json") for t in result.trips]
    return {**draft, "reply": {**reply, "text": text, "tool_calls": []}, "tools": tools_used, "trips": trips}


@DBOS.step(name="persyn.assess")
async def assess_step(agent_id: str, event_id: str, setup: dict[str, Any]) -> dict[str, Any]:
    with rebind(step_key=_step_key()):
        return await runtime().assess(agent_id, event_id, setup)


@DBOS.step(name="persyn.finish_run")
async def finish_run_step(
    agent_id: str, event_id: str, setup: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any] | None:
    return await runtime().finish_run(agent_id, event_id, setup, result)


async def _finish_run(agent_id: str, event_id: str, setup: dict[str, Any], result: dict[str, Any]) -> None:
    """A self-initiated run (reminder, heartbeat) is one conversation: log it, close it and
    consolidate it (its close hooks, enqueued here in the workflow under a derived id)."""
    if setup.get("kind", "message") == "message":
        return
    closed = await finish_run_step(agent_id, event_id, setup, result)
    if closed is None:
        return
    # The one enqueue of close hooks (its workflow id derived from the conversation and its
    # close, as the idle close and the sweep derive it: consolidated once).
    from persyn.store.base import Conversation

    await runtime().enqueue_close_hooks(Conversation.model_validate(closed))


@DBOS.step(name="persyn.fire_due")
async def fire_due_step() -> int:
    return await runtime().autonomy.fire_due(from_step=True)


@DBOS.workflow(name="persyn.scheduler_tick")
async def scheduler_tick(scheduled_at: datetime, context: Any) -> None:
    """The DBOS schedule's tick (every `[autonomy] tick_seconds`): fire due reminders. Each
    firing is an event with a dedup id derived from `reminder_id@fire_time`, so a tick that
    runs twice, or in several processes, still fires each reminder once."""
    await fire_due_step()


async def _extract_if_due(
    agent_id: str, event_id: str, setup: dict[str, Any], result: dict[str, Any]
) -> None:
    """Every `[conversation] extract_every_messages` messages of an open conversation, read
    what is new for observations and the graph, off the critical path. The count is a
    trigger only (in memory: a restart just waits for more messages or the close); what is
    read is decided by durable watermarks, so a replay or a second trigger reads nothing twice."""
    conversation_id = setup["conversation_id"]
    if not runtime().extraction_due(conversation_id, 2 if result.get("transmitted") else 1):
        return
    queue = runtime().queue(BACKGROUND_QUEUE)
    with SetWorkflowID(derived_id(id_time(event_id), event_id, "extract")):
        await queue.enqueue_async(extract, agent_id, conversation_id)
    runtime().wake_queue(BACKGROUND_QUEUE)


@DBOS.step(name="persyn.extract_step")
async def extract_step(agent_id: str, conversation_id: str, hook_name: str) -> None:
    with rebind(step_key=_step_key()):
        await runtime().run_extraction(agent_id, conversation_id, hook_name)


@DBOS.workflow(name="persyn.extract")
async def extract(agent_id: str, conversation_id: str) -> None:
    """Incremental observations and graph extraction for an open conversation."""
    with bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id, conversation_id=conversation_id)):
        for hook_name in runtime().extraction_names():
            await extract_step(agent_id, conversation_id, hook_name)


@DBOS.step(name="persyn.conversation_hook")
async def conversation_hook_step(agent_id: str, conversation_id: str, hook_name: str) -> None:
    with rebind(step_key=_step_key()):
        await runtime().run_conversation_hook(agent_id, conversation_id, hook_name)


@DBOS.workflow(name="persyn.consolidation_retry")
async def consolidation_retry(agent_id: str, conversation_id: str) -> None:
    """A failed consolidation tried again (enqueued by the housekeeping sweep when due,
    under a fresh id per attempt: `conversation_jobs.consolidation_retry_id`)."""
    with bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id, conversation_id=conversation_id)):
        await conversation_hook_step(agent_id, conversation_id, "consolidate")


@DBOS.workflow(name="persyn.conversation_closed")
async def conversation_closed(agent_id: str, conversation_id: str) -> None:
    """Runs on the background queue after a conversation closes: each registered hook
    (consolidation, later) is a durable step, so a crash between close and hook loses
    nothing."""
    with bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id, conversation_id=conversation_id)):
        for hook_name in runtime().conversation_hook_names():
            await conversation_hook_step(agent_id, conversation_id, hook_name)
