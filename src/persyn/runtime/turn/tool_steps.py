"""The tool loop's steps (SPEC §4.6): the tools offered, one more model round-trip, one tool
call. `run_durable_tool_loop` drives `tools.loop.run_tool_loop` from the workflow with each
round-trip and each call a durable step (the step callables are injected), so a crash resumes
after the last one, never re-running a tool or re-billing a call, and the loop breakers are
counted deterministically outside the steps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from persyn.cognition.pipeline import TurnSetup
from persyn.core.config import Settings, Task
from persyn.core.errors import ModelError
from persyn.core.events import Event
from persyn.core.records import channel_key
from persyn.gateway.base import Completion, Prompt, SinkCallable, SinkEvent, ToolCall, ToolSpec
from persyn.gateway.gateway import ModelGateway
from persyn.runtime.channel import Channel, safe_sink
from persyn.runtime.turn.agent_tools import AgentToolDeps, agent_skills, build_registry
from persyn.runtime.turn.models import Draft, RoundTrip, ToolUse
from persyn.tools.loop import run_tool_loop
from persyn.tools.registry import ToolOutcome, ToolRegistry
from persyn.tracing import Tracing

__all__ = ["ToolSteps", "run_durable_tool_loop"]

log = logging.getLogger(__name__)

_SHOWN_ARGUMENTS = 200  # characters of a tool call's arguments shown live

EventLookup = Callable[[str, str], Awaitable[Event]]


class ToolSteps:
    """The agent's tools, bound per activation, and the tool loop's step bodies."""

    def __init__(
        self,
        *,
        settings: Settings,
        gateways: Mapping[str, ModelGateway],
        channels: Mapping[str, Channel],
        deps: AgentToolDeps,
        event: EventLookup,
        tracing: Tracing,
    ) -> None:
        self.settings = settings
        self.tracing = tracing
        self.gateways = gateways
        self.channels = channels
        self.deps = deps
        self._event = event
        # What each agent is offered on each channel, with what it was built from: the MCP
        # tools' version and the skills it may see there (a skill added or changed changes
        # `use_skill`'s description; an authored one is shown only in its compartment).
        self._specs: dict[str, tuple[object, tuple[ToolSpec, ...]]] = {}

    async def start(self) -> None:
        """Connect the MCP servers (bounded; one that fails offers no tools) and find the
        sandbox provider (none: no `run_code`)."""
        if self.deps.sandbox is not None:
            await self.deps.sandbox.start()
        if self.deps.mcp is not None:
            await self.deps.mcp.start()

    async def stop(self) -> None:
        if self.deps.mcp is not None:
            await self.deps.mcp.stop()

    def notice(self) -> str | None:
        """What the operator should know about the tools at start: MCP servers that failed,
        a sandbox that is enabled but has no provider."""
        notices = [
            self.deps.mcp.notice() if self.deps.mcp is not None else None,
            self.deps.sandbox.notice() if self.deps.sandbox is not None else None,
        ]
        return "; ".join(n for n in notices if n) or None

    def offered(self, agent_id: str) -> bool:
        """Tools go to the respond model unless disabled, or it is the built-in tiny model."""
        if not self.settings.tools.enabled:
            return False
        gateway = self.gateways.get(agent_id)
        spec = gateway.spec_for(Task.RESPOND) if gateway is not None else None
        return not (spec is not None and spec.provider == "local" and not spec.name)

    def registry(self, setup: TurnSetup, event_id: str, call_key: str | None = None) -> ToolRegistry:
        """The tools of one activation; `call_key` names the one tool call they serve (see
        `run_tool`)."""
        return build_registry(self.deps, setup, event_id, call_key)

    def specs(self, setup: TurnSetup, event_id: str) -> tuple[ToolSpec, ...]:
        """What the model is offered: the same for every turn of an agent on a channel (a
        tool's behaviour is bound per activation, its name, description and schema are not),
        so built once per agent and channel (building the registry generates every tool's schemas:
        milliseconds) — and again when an MCP server's tools or the agent's skills change."""
        where = channel_key(setup.service, setup.channel)
        skills = agent_skills(self.settings, self.deps.agents[setup.agent_id], where)
        key = (
            self.deps.mcp.version if self.deps.mcp is not None else 0,
            skills.fingerprint() if skills is not None else (),
        )
        cached = self._specs.get(f"{setup.agent_id} {where}")
        if cached is None or cached[0] != key:
            specs = self.registry(setup, event_id).specs()
            # The registry's skills scan may have restored a protected skill: key what was built.
            key = (key[0], skills.fingerprint() if skills is not None else ())
            self._specs[f"{setup.agent_id} {where}"] = cached = (key, specs)
        return cached[1]

    async def _sink(self, agent_id: str, event_id: str) -> SinkCallable | None:
        event = await self._event(agent_id, event_id)
        return safe_sink(self.channels.get(event.service), event)

    async def continue_respond(
        self, agent_id: str, event_id: str, setup: TurnSetup, prompt: Prompt
    ) -> RoundTrip:
        """One more round-trip of the tool loop: the prompt with the tool results so far. A
        failing model ends the loop with what was said so far (the caller's fallback)."""
        sink = await self._sink(agent_id, event_id)
        tools = self.specs(setup, event_id)
        try:
            completion = await self.gateways[agent_id].complete(
                Task.RESPOND, prompt, tools=tools, sink=sink, phase="draft"
            )
        except ModelError as exc:
            log.warning("a tool-loop round-trip failed: %s", exc)
            return RoundTrip(failure=str(exc))
        return RoundTrip(text=completion.text, tool_calls=completion.tool_calls, usage_id=completion.usage_id)

    async def run_tool(
        self, agent_id: str, event_id: str, setup: TurnSetup, call: ToolCall, *, call_key: str | None = None
    ) -> ToolOutcome:
        """One tool call; any failure comes back as an error result the model reads.
        `call_key` identifies the call across re-runs of its durable step (the step's
        workflow and position, never what the model put in it): what it sends counts once."""
        with self.tracing.tool_call(call.name, lambda: json.dumps(call.args, default=str)) as span:
            sink = await self._sink(agent_id, event_id)
            if sink is not None:
                arguments = _shortened(json.dumps(call.args, default=str, ensure_ascii=False))
                sink(SinkEvent(phase="draft", kind="tool_start", text=call.name, arguments=arguments))
            outcome = await self.registry(setup, event_id, call_key).call(call)
            span.result(status=outcome.status.value, ok=outcome.ok, content=outcome.content)
            if sink is not None:
                sink(SinkEvent(phase="draft", kind="tool_end", text=call.name, status=outcome.status.value))
            return outcome


def _shortened(arguments: str) -> str:
    """A call's arguments as the live view shows them: at most `_SHOWN_ARGUMENTS` characters."""
    return arguments if len(arguments) <= _SHOWN_ARGUMENTS else arguments[: _SHOWN_ARGUMENTS - 1] + "…"


async def run_durable_tool_loop(
    tools: ToolSteps,
    setup: TurnSetup,
    draft: Draft,
    respond_more: Callable[[Prompt], Awaitable[RoundTrip]],
    tool_call: Callable[[ToolCall], Awaitable[ToolOutcome]],
) -> Draft:
    """The respond step asked for tools: run the loop, each model round-trip through
    `respond_more` and each call through `tool_call` (durable steps). Returns the draft with
    the final answer; the tools used and any breaker trips go into it for the deliberation
    trace."""
    registry = tools.registry(setup, setup.event_id)
    reply = draft.reply
    first: list[Completion] = [Completion(text=reply.text or "", tool_calls=reply.tool_calls)]
    failure: list[str] = []

    async def complete(prompt: Prompt, _tools: Sequence[ToolSpec]) -> Completion:
        if first:
            return first.pop()
        more = await respond_more(prompt)
        if more.failure:
            failure.append(more.failure)
        return Completion(text=more.text, tool_calls=more.tool_calls)

    if draft.prepared is None:
        raise ValueError("a draft that asks for tools has a prompt")
    result = await run_tool_loop(draft.prepared.prompt, registry, complete, run_call=tool_call)
    text = result.text.strip()
    if not text:  # the safe fallback: say what was done rather than nothing
        done = ", ".join(dict.fromkeys(o.name for o in result.outcomes if o.ok)) or "nothing"
        text = (
            f"(I used {done}, but could not put an answer into words{': ' + failure[0] if failure else ''}.)"
        )
    return draft.model_copy(
        update={
            "reply": reply.model_copy(update={"text": text, "tool_calls": ()}),
            "tools": tuple(ToolUse(name=o.name, status=o.status.value) for o in result.outcomes),
            "trips": tuple(result.trips),
        }
    )
