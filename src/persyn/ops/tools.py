"""`persyn tools`: the tools an agent is offered, by source, and one call run as the agent
would run it — the same registry (`runtime.turn.agent_tools.build_registry`), the same MCP
connections, argument checks, timeouts and result caps — for checking a configuration.

The call runs as an activation on `--channel` (default `cli:operator`, a channel of its own
with nobody present), so the memory tools show what the agent could bring up there and no
more. It sends nothing: `message_contact` is refused here (`persyn send` exists for that). It
authors none of the agent's own intent either: creating a goal or a reminder, editing a reminder,
revising or reopening a goal are refused before anything runs (`tools.builtin.own.not_the_operators`,
SPEC §4.7, §4.8), also through `call_tool`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings, Task, images_api_key, mcp_headers
from persyn.core.errors import InputError, ToolError
from persyn.core.ids import new_id
from persyn.gateway.auto import resolve_auto
from persyn.gateway.base import ToolCall
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.provider_tools import enabled_provider_tools
from persyn.ops.history import opened_store
from persyn.runtime.turn.agent_tools import AgentToolDeps, build_registry
from persyn.runtime.turn.images import ImageService
from persyn.store import Store
from persyn.tools.builtin.own import not_the_operators
from persyn.tools.mcp.servers import McpServerStatus, McpTools
from persyn.tools.registry import CALL_TOOL, ToolOutcome, ToolRegistry, ToolStatus
from persyn.tools.sandbox.service import SandboxService
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.meter import Meter

__all__ = ["OPERATOR_CHANNEL", "ToolListing", "ToolsReport", "agent_registry", "call_tool", "list_tools"]

OPERATOR_CHANNEL = "cli:operator"


class ToolListing(BaseModel):
    """One tool the agent is offered."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: Literal["built-in", "mcp", "provider"]
    server: str | None = None  # the MCP server that offers it
    models: tuple[str, ...] = ()  # for a provider tool: the models of the respond chain that run it
    description: str
    deferred: bool = False  # listed in call_tool's description rather than defined in full


class ToolsReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    agent: str
    tools: tuple[ToolListing, ...]
    mcp_servers: tuple[McpServerStatus, ...]


class _NoOutreach:
    """`persyn tools call` sends nothing on the agent's behalf."""

    async def send_to_contact(self, *args: Any, **kwargs: Any) -> str:
        raise ToolError("persyn tools call does not send messages; use `persyn send` to talk to the agent")

    async def messages_sent(self, agent_id: str, event_id: str) -> int:
        return 0


class _CliGateway(Mapping[str, ModelGateway]):
    """The one agent's gateway for `persyn tools call run_code`, built on first use (listing
    tools calls no model), metered to the usage log like the runtime's, closed on exit."""

    def __init__(self, settings: Settings, agent: AgentConfig, clock: Clock) -> None:
        self._settings, self._agent, self._clock = settings, agent, clock
        self._gateway: ModelGateway | None = None
        self._meter: Meter | None = None

    def __getitem__(self, agent_id: str) -> ModelGateway:
        if agent_id != self._agent.id:
            raise KeyError(agent_id)
        if self._gateway is None:
            settings, _ = resolve_auto(self._settings)
            self._gateway = ModelGateway(settings, self._agent, self.meter(), clock=self._clock)
        return self._gateway

    def meter(self) -> Meter:
        """The usage log's meter (opened on first use, closed with the gateway)."""
        if self._meter is None:
            settings, _ = resolve_auto(self._settings)
            adapters = [JsonlAdapter(settings.usage_log_path)] if settings.metering.event_log else []
            self._meter = Meter(adapters)
        return self._meter

    def __iter__(self) -> Iterator[str]:
        return iter((self._agent.id,))

    def __len__(self) -> int:
        return 1

    async def aclose(self) -> None:
        if self._gateway is not None:
            await self._gateway.aclose()
        if self._meter is not None:
            self._meter.close()


@asynccontextmanager
async def agent_registry(
    settings: Settings, agent: AgentConfig, clock: Clock, channel: str
) -> AsyncIterator[tuple[ToolRegistry, McpTools]]:
    """The registry an activation of `agent` on `channel` (nobody else present) would get,
    with the MCP servers connected for as long as the context lasts."""
    async with _agent_tools(settings, agent, clock, channel) as (registry, mcp, _images):
        yield registry, mcp


@asynccontextmanager
async def _agent_tools(
    settings: Settings, agent: AgentConfig, clock: Clock, channel: str
) -> AsyncIterator[tuple[ToolRegistry, McpTools, ImageService | None]]:
    service, sep, name = channel.partition(":")
    if not sep or not service or not name:
        raise InputError(f"channel {channel!r} must be SERVICE:CHANNEL, as `persyn channels list` prints it")
    gateway = _CliGateway(settings, agent, clock)
    sandbox = SandboxService(settings, gateway) if settings.sandbox.enabled else None
    if sandbox is not None:
        await sandbox.start()
    async with (
        opened_store(settings) as store,
        McpTools(settings.mcp, mcp_headers(settings), log_dir=settings.logs_dir) as mcp,
        contextlib.aclosing(gateway),
    ):
        await store.ensure_agent(agent.id, agent.name, clock.now())
        images = _cli_images(settings, store, clock, gateway) if settings.images.enabled else None
        deps = AgentToolDeps(
            store=store,
            clock=clock,
            settings=settings,
            agents={a.id: a for a in settings.agents},
            outreach=_NoOutreach(),
            mcp=mcp,
            sandbox=sandbox,
            images=images,
        )
        event_id = new_id()
        setup = TurnSetup(
            agent_id=agent.id,
            event_id=event_id,
            service=service,
            channel=name,
            conversation_id=new_id(),
            person_id=None,
            speaker_name="operator",
            inbound_message_id=event_id,
            received_at=clock.now(),
            participant_ids=(),
        )
        yield build_registry(deps, setup, event_id, call_key=event_id), mcp, images


async def list_tools(settings: Settings, agent: AgentConfig, clock: Clock) -> ToolsReport:
    async with agent_registry(settings, agent, clock, OPERATOR_CHANNEL) as (registry, mcp):
        listings: list[ToolListing] = []
        offered = {spec.name: spec.description for spec in registry.specs() if not spec.provider}
        for name in sorted({*offered, *registry.names}):
            server = mcp.server_of(name)
            tool = registry.get(name)
            listings.append(
                ToolListing(
                    name=name,
                    source="mcp" if server else "built-in",
                    server=server,
                    description=offered.get(name) or (tool.description.strip() if tool else ""),
                    deferred=registry.deferred(name),
                )
            )
        chain = settings.models_for(agent, Task.RESPOND)
        for name in registry.provider_names:
            spec = next(s for s in registry.specs() if s.provider and s.name == name)
            runners = tuple(m for m in chain if name in enabled_provider_tools(settings, m))
            listings.append(
                ToolListing(name=name, source="provider", description=spec.description, models=runners)
            )
        return ToolsReport(agent=agent.name, tools=tuple(listings), mcp_servers=mcp.statuses())


async def call_tool(
    settings: Settings,
    agent: AgentConfig,
    clock: Clock,
    name: str,
    arguments: dict[str, Any],
    channel: str = OPERATOR_CHANNEL,
) -> ToolOutcome:
    refused = _not_the_operators(name, arguments)
    if refused is not None:
        raise InputError(refused)
    async with _agent_tools(settings, agent, clock, channel) as (registry, _mcp, images):
        outcome = await registry.call(ToolCall(id=new_id(), name=name, args=arguments), registry.breaker())
        reference = images.started(outcome) if images is not None else None
        if images is None or reference is None:
            return outcome
        # Checking a configuration means seeing the render: it runs here, and waits. It is
        # metered to the usage log like the agent's; nothing is said in any conversation.
        news = await images.render(reference)
        images.library.end_job(reference)
        if news is None or news.outcome == "failed":
            why = news.detail if news is not None else "the job was lost"
            return outcome.model_copy(
                update={
                    "status": ToolStatus.FAILED,
                    "content": f"{outcome.content}\nrender failed: {why}",
                    "error": why,
                }
            )
        stored = images.library.get(reference, (news.job.scope,))
        where = str(images.library.path(stored)) if stored is not None else reference
        output = {**(outcome.output or {}), "status": "rendered", "file": where}
        return outcome.model_copy(
            update={"content": json.dumps(output, ensure_ascii=False), "output": output}
        )


def _not_the_operators(name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why the operator may not run this call as the agent (`tools.builtin.own.not_the_operators`),
    looking through `call_tool` to the deferred tool it would run."""
    inner, inner_arguments = arguments.get("name"), arguments.get("arguments")
    if name == CALL_TOOL and isinstance(inner, str) and isinstance(inner_arguments, Mapping):
        return not_the_operators(inner, cast(Mapping[str, Any], inner_arguments))
    return not_the_operators(name, arguments)


def _cli_images(settings: Settings, store: Store, clock: Clock, gateway: _CliGateway) -> ImageService:
    """The image tools for `persyn tools call`: no outbox (it sends nothing), no autonomy run
    to admit, the usage log of the CLI's gateway."""

    async def admit(agent_id: str, thread_id: str) -> None:
        return None

    return ImageService(
        settings,
        store=store,
        clock=clock,
        agents={a.id: a for a in settings.agents},
        outbox=None,
        admit=admit,
        meter=gateway.meter(),
        api_key=images_api_key(settings),
    )
