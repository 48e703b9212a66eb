"""The agent's own tools, bound to one activation (SPEC §4.6): the registry the respond step
advertises and the tool-call steps run. Built for every tool call (each is its own durable
step), so a per-activation cap is counted from durable state, never in the registry; every tool
sees who is present where.

The tools come from the providers registered in the `persyn.tools` entry points (one line each in
`pyproject.toml`; `tools/providers.py`), each given a `ToolScope` of this activation:
- reminders and goals (`tools/builtin/own.py`): the store, the agent, the clock; a new reminder
  addresses the person and channel of the turn that set it;
- quick facts (`tools/builtin/facts.py`);
- memory and dialog search, raw dialog recall (`tools/builtin/memory.py`): the current
  channel, the people present and the channel groups — a tool never shows what retrieval
  would withhold;
- message a contact (`tools/builtin/outreach.py`): sends through `Outreach.send_to_contact`, at most
  `[autonomy] max_messages_per_run` per activation, counted from what the run has already
  sent (durable: this registry is rebuilt for every tool call);
- phone a contact, end the call (`tools/builtin/calls.py`): `place_call` through
  `runtime/background/calls.Calls` (quiet hours, the audience, the autonomy budget, the per-run
  and daily caps), only when `[voice]` places calls; `end_call` on a call;
- exact arithmetic, recent autonomous activity, self-inspection;
- the knowledge graph (`tools/builtin/graph.py`), through the same view as the turn's graph
  context (this channel, its compartment, the people present), when `[graph]` is enabled;
- the shared artifacts (`tools/builtin/artifacts.py`): `workspace_list|read|write`, visible from this
  channel and its compartment, each version attributed, when `[artifacts]` is enabled;
- `run_code` (`tools/sandbox/agent.py`, `tools/sandbox/service.py`): a task delegated to the
  sandbox agent, only when a sandbox provider is present (no host fallback), in the workspace of
  the compartment this run's provenance allows (`tools/sandbox/workspace.py`);
- images (`tools/images/generate.py`, `runtime/turn/images.py`): `generate_image` and `edit_image` when
  `[images]` names an API; each answers at once and the render runs in the background;
- reading the world (`tools/world/web.py`, `tools/world/reference.py`): `web_search` and `read_url` when
  `[browse]` turns them on, `lookup_reference` when `[reference]` names archives;
- skills (`tools/skills/library.py`): `use_skill`, whose description lists the agent's skills by name
  and description, and `write_skill`, when `[skills]` is enabled;
- the tools of the configured MCP servers (`tools/mcp/servers.py`), named `<server>__<tool>`:
  the connections are the runtime's, held across activations; a call runs in the tool step
  like any other, under the same breakers and caps.

Goals, reminders, quick facts and activity entries carry provenance (ARCHITECTURE §4, turn
2): the tools show them only to the `Audience` of this activation, and store what they write
with the activation's provenance — a conversation turn's channel, the people present and
the channel's default sensitivity; a self-initiated run's, narrowed by all it read
(`runtime.background.autonomy.narrow_run`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.records import channel_key
from persyn.memory.access import Provenanced, in_compartment
from persyn.memory.consolidate import default_sensitivity
from persyn.runtime.background.autonomy import narrow_run, recent_activity, run_provenance
from persyn.runtime.background.calls import Calls
from persyn.runtime.turn.images import ImageService
from persyn.store.base import Provenance, ReminderAction, Store
from persyn.store.capabilities import capability
from persyn.store.ports.activity import ActivityPort
from persyn.tools.activation import Audience, FixedProvenance, RunProvenance
from persyn.tools.mcp.servers import McpTools
from persyn.tools.providers import ToolScope, tool_providers
from persyn.tools.registry import ToolRegistry
from persyn.tools.sandbox.service import SandboxService
from persyn.tools.skills.library import SkillLibrary

__all__ = ["AgentToolDeps", "Outreach", "agent_skills", "build_registry"]

_log = logging.getLogger(__name__)
_STARTED = datetime.now().astimezone()
_ACTIVITY_SCAN = 500


@dataclass(frozen=True)
class _StoredRun:
    """A self-initiated run's provenance, kept in the store across its durable steps."""

    store: Store
    agent_id: str
    event_id: str
    home: str

    async def written(self) -> Provenance:
        return await run_provenance(self.store, self.agent_id, self.event_id, self.home)

    async def read(self, items: Sequence[Provenanced]) -> None:
        await narrow_run(self.store, self.agent_id, self.event_id, self.home, items)


class Outreach(Protocol):
    """Messages the agent initiates to its contacts (SPEC §4.5), counted per run."""

    async def send_to_contact(
        self,
        agent_id: str,
        event_id: str,
        person_id: str,
        service: str,
        channel: str,
        text: str,
        *,
        call_key: str | None = None,
    ) -> str: ...

    async def messages_sent(self, agent_id: str, event_id: str) -> int: ...


@dataclass(frozen=True)
class AgentToolDeps:
    """What the agent's tools are built from."""

    store: Store
    clock: Clock
    settings: Settings
    agents: Mapping[str, AgentConfig]
    outreach: Outreach
    mcp: McpTools | None = None
    sandbox: SandboxService | None = None  # `run_code`, when a sandbox provider is present
    images: ImageService | None = None  # `generate_image` / `edit_image`, when `[images]` is set
    calls: Calls | None = None  # `place_call` / `end_call`, when `[voice]` places calls


def build_registry(
    deps: AgentToolDeps, setup: TurnSetup, event_id: str, call_key: str | None = None
) -> ToolRegistry:
    """The tools of one activation, for the tool call `call_key` (its durable step's
    identity; `ToolSteps.run_tool`), which the message cap counts sends by."""
    agent_id = setup.agent_id
    store, clock, settings = deps.store, deps.clock, deps.settings
    participants = setup.participant_ids or ((setup.person_id,) if setup.person_id else ())
    present = tuple(p for p in participants if p != agent_id)
    here = ReminderAction(
        person_id=setup.person_id,
        service=setup.service if setup.kind == "message" else None,
        channel=setup.channel if setup.kind == "message" else None,
    )
    where = channel_key(setup.service, setup.channel)
    audience = Audience(
        channel=where,
        present=present,
        channel_groups=settings.memory.channel_groups,
        agent_id=agent_id,
        reflecting=setup.kind == "heartbeat",
    )
    run: RunProvenance = FixedProvenance(
        Provenance(
            channel=where,
            participant_ids=present,
            sensitivity=default_sensitivity(settings.memory, setup.service),
        )
    )
    if setup.kind != "message":
        run = _StoredRun(store, agent_id, event_id, where)

    async def send(person_id: str, service: str, channel: str, text: str) -> str:
        return await deps.outreach.send_to_contact(
            agent_id, event_id, person_id, service, channel, text, call_key=call_key
        )

    async def sent() -> int:
        return await deps.outreach.messages_sent(agent_id, event_id)

    async def activity(limit: int, kind: str | None) -> list[Any]:
        entries = await recent_activity(capability(store, ActivityPort), agent_id, _ACTIVITY_SCAN, kind)
        return [e for e in entries if audience.sees(e.provenance)][:limit]

    registry = ToolRegistry(config=settings.tools)
    scope = ToolScope(
        settings=settings,
        store=store,
        clock=clock,
        agent=deps.agents[agent_id],
        agents=deps.agents,
        event_id=event_id,
        kind=setup.kind,
        where=where,
        present=present,
        here=here,
        audience=audience,
        run=run,
        send=send,
        sent=sent,
        activity=activity,
        advertised=lambda: registry.names,
        started_at=_STARTED,
        services=tuple(
            service
            for service in (
                deps.mcp,
                deps.sandbox,
                None if deps.images is None else deps.images.context(setup, event_id, call_key),
                None if deps.calls is None else deps.calls.line(setup, event_id, call_key),
                agent_skills(settings, deps.agents[agent_id], where),
            )
            if service is not None
        ),
    )
    for provider in tool_providers():
        for tool in provider.tools(scope):
            if not (provider.gives_way and tool.name in registry):
                registry.register(tool)
        if provider.provider_specs is not None:
            registry.add_provider_tools(provider.provider_specs(scope))
    return registry


def agent_skills(settings: Settings, agent: AgentConfig, channel: str | None = None) -> SkillLibrary | None:
    """The skills `agent` may use on `channel` (its own authored skills only when written in
    that channel's compartment; every one for None, the operator); None when `[skills]` is off."""
    if not settings.skills.enabled:
        return None
    groups = settings.memory.channel_groups
    return SkillLibrary.for_agent(
        settings.skills,
        settings.home,
        agent.id,
        agent.name,
        channel=channel,
        visible=None if channel is None else lambda written_on: in_compartment(written_on, channel, groups),
    )
