"""The agent's own tools, bound to one activation (SPEC §4.6): the registry the respond step
advertises and the tool-call steps run. Built for every tool call (each is its own durable
step), so a per-activation cap is counted from durable state, never in the registry; every tool
sees who is present where.

Tools and what they are bound to:
- reminders and goals (`tools/own.py`): the store, the agent, the clock; a new reminder
  addresses the person and channel of the turn that set it;
- quick facts (`tools/facts.py`);
- memory and dialog search, raw dialog recall (`tools/memory_tools.py`): the current
  channel, the people present and the channel groups — a tool never shows what retrieval
  would withhold;
- message a contact (`tools/outreach.py`): sends through `Outreach.send_to_contact`, at most
  `[autonomy] max_messages_per_run` per activation, counted from what the run has already
  sent (durable: this registry is rebuilt for every tool call);
- exact arithmetic, recent autonomous activity, self-inspection;
- the knowledge graph (`tools/graph_tools.py`), through the same view as the turn's graph
  context (this channel, its compartment, the people present), when `[graph]` is enabled;
- the shared artifacts (`tools/artifacts.py`): `workspace_list|read|write`, visible from this
  channel and its compartment, each version attributed, when `[artifacts]` is enabled;
- `run_code` (`tools/sandbox_agent.py`, `ops/sandbox.py`): a task delegated to the
  sandbox agent, only when a sandbox provider is present (no host fallback), in the workspace of
  the compartment this run's provenance allows (`tools/sandbox_workspace.py`);
- images (`tools/images.py`, `runtime/turn/images.py`): `generate_image` and `edit_image` when
  `[images]` names an API; each answers at once and the render runs in the background;
- reading the world (`tools/web.py`, `tools/reference.py`): `web_search` and `read_url` when
  `[browse]` turns them on, `lookup_reference` when `[reference]` names archives;
- skills (`tools/skills.py`): `use_skill`, whose description lists the agent's skills by name
  and description, and `write_skill`, when `[skills]` is enabled;
- the tools of the configured MCP servers (`tools/mcp_servers.py`), named `<server>__<tool>`:
  the connections are the runtime's, held across activations; a call runs in the tool step
  like any other, under the same breakers and caps.

Goals, reminders, quick facts and activity entries carry provenance (ARCHITECTURE §4, turn
2): the tools show them only to the `Audience` of this activation, and store what they write
with the activation's provenance — a conversation turn's channel, the people present and
the channel's default sensitivity; a self-initiated run's, narrowed by all it read
(`runtime.autonomy.narrow_run`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings, Task, browse_search_key
from persyn.core.records import Sensitivity, channel_key
from persyn.gateway.provider_tools import provider_tool_specs
from persyn.memory.access import Provenanced, eligible_channels, in_compartment
from persyn.memory.consolidate import default_sensitivity
from persyn.ops.sandbox import SandboxService
from persyn.runtime.background.autonomy import narrow_run, recent_activity, run_provenance
from persyn.runtime.turn.images import ImageService
from persyn.store.base import Provenance, ReminderAction, Store
from persyn.store.capabilities import capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphView
from persyn.tools.activity import ActivityContext, activity_tools
from persyn.tools.arithmetic import calculator_tool
from persyn.tools.artifacts import ArtifactsContext, artifact_tools
from persyn.tools.facts import fact_tools
from persyn.tools.graph_tools import GraphToolsContext, graph_tools
from persyn.tools.images import image_tools
from persyn.tools.inspection import SelfInspectionContext, inspection_tools
from persyn.tools.mcp_servers import McpTools
from persyn.tools.memory_tools import MemoryToolsContext, memory_tools
from persyn.tools.outreach import OutreachContext, outreach_tools
from persyn.tools.own import (
    Audience,
    FixedProvenance,
    OwnToolsContext,
    RunProvenance,
    goal_tools,
    reminder_tools,
)
from persyn.tools.reference import ReferenceLibrary, reference_tools
from persyn.tools.registry import Tool, ToolRegistry
from persyn.tools.skills import SkillLibrary, skill_tools
from persyn.tools.web import search_provider, web_tools

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
    own = OwnToolsContext(
        store=store, agent_id=agent_id, clock=clock, default_action=here, audience=audience, run=run
    )

    async def send(person_id: str, service: str, channel: str, text: str) -> str:
        return await deps.outreach.send_to_contact(
            agent_id, event_id, person_id, service, channel, text, call_key=call_key
        )

    async def sent() -> int:
        return await deps.outreach.messages_sent(agent_id, event_id)

    async def activity(limit: int, kind: str | None) -> list[Any]:
        entries = await recent_activity(store, agent_id, _ACTIVITY_SCAN, kind)
        return [e for e in entries if audience.sees(e.provenance)][:limit]

    async def shown(provenances: Sequence[Provenance]) -> None:
        await run.read(provenances)

    registry = ToolRegistry(config=settings.tools)
    tools: list[Tool[Any, Any]] = [
        *reminder_tools(own),
        *goal_tools(own),
        *fact_tools(own),
        *memory_tools(
            MemoryToolsContext(
                store=store,
                agent_id=agent_id,
                channel=channel_key(setup.service, setup.channel),
                present=present,
                channel_groups=settings.memory.channel_groups,
                # Raw dialog has no sensitivity of its own: as a confidence of its
                # conversation — this exact channel, only among people who were there.
                dialog_sensitivity=Sensitivity.CONFIDENTIAL,
            )
        ),
        *outreach_tools(
            OutreachContext(
                store=store,
                agent_id=agent_id,
                clock=clock,
                send=send,
                max_messages=settings.autonomy.max_messages_per_run,
                sent=sent,
            )
        ),
        calculator_tool(),
        *activity_tools(ActivityContext(source=activity, sees=audience.sees, read=shown)),
        *inspection_tools(
            SelfInspectionContext(
                agent_name=deps.agents[agent_id].name,
                agent_id=agent_id,
                clock=clock,
                models={task.value: settings.model_for(deps.agents[agent_id], task) for task in Task},
                memory=settings.memory,
                advertised_tools=lambda: registry.names,
                tools=settings.tools,
                settings={
                    "heartbeat_minutes": settings.autonomy.heartbeat_minutes,
                    "daily_token_budget": settings.autonomy.daily_token_budget,
                },
                started_at=_STARTED,
            )
        ),
    ]
    graph = capability(store, GraphPort)
    if settings.graph.enabled and graph is not None:
        tools += graph_tools(
            GraphToolsContext(
                store=graph,
                agent_id=agent_id,
                view=GraphView(
                    channel=where,
                    eligible=eligible_channels(where, settings.memory.channel_groups),
                    present=present,
                ),
                read=shown,
                max_relations=settings.graph.max_relations,
                max_path_hops=settings.graph.max_path_hops,
            )
        )
    if settings.artifacts.enabled:
        tools += artifact_tools(
            ArtifactsContext(
                store=store,
                agent_id=agent_id,
                eligible=eligible_channels(where, settings.memory.channel_groups),
                agent_names={a.id: a.name for a in deps.agents.values()},
                clock=clock,
                max_chars=settings.artifacts.max_chars,
            )
        )
    if deps.images is not None:
        tools += image_tools(deps.images.context(setup, event_id, call_key))
    tools += web_tools(settings.browse, search_provider(settings.browse, browse_search_key(settings)))
    tools += reference_tools(_library(settings))
    skills = agent_skills(settings, deps.agents[agent_id], where)
    library = skills

    def skill_folders() -> dict[str, Path]:
        """The skills this activation may use, read when a `run_code` task starts (after
        protected ones were restored), so their scripts run inside the sandbox."""
        return {} if library is None else {skill.name: skill.folder for skill in library.scan()}

    code = None
    if deps.sandbox is not None:  # its workspace: the compartment of what this run writes
        code = deps.sandbox.tool_for(
            agent_id, run.written, own=setup.kind != "message", run_id=event_id, skills=skill_folders
        )
    if code is not None:
        tools.append(code)
    if skills is not None:
        try:
            tools += skill_tools(skills)
        except OSError as exc:  # an unreadable or read-only skills folder: answer without skills
            _log.warning("skills are unavailable: %s", exc)
    for tool in tools:
        registry.register(tool)
    for tool in deps.mcp.tools() if deps.mcp is not None else ():
        if tool.name not in registry:  # `__` never appears in a built-in tool's name
            registry.register(tool)
    registry.add_provider_tools(provider_tool_specs(settings, deps.agents[agent_id]))
    return registry


def _library(settings: Settings) -> ReferenceLibrary | None:
    archives = [settings.home / Path(path).expanduser() for path in settings.reference.archives]
    if not archives:
        return None
    return ReferenceLibrary(
        archives, max_results=settings.reference.max_results, max_chars=settings.reference.max_chars
    )


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
