"""The built-in tool groups' providers (`tools/providers.py`), each one line of the
`persyn.tools` entry points: the agent's reminders and goals, quick facts, memory and dialog
search, messaging a contact (and phoning one: `calls.py`, when `[voice]` places calls), arithmetic, recent activity, self-inspection, the knowledge graph
(`[graph]`), the shared artifacts (`[artifacts]`), reading on in a document someone sent
(`read_attachment`), and the tools the model provider runs itself (`[models] provider_tools`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from persyn.core.config import Task
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.gateway.base import ToolSpec
from persyn.gateway.provider_tools import provider_tool_specs
from persyn.memory.access import eligible_channels
from persyn.senses.library import AttachmentLibrary
from persyn.store.base import Provenance
from persyn.store.capabilities import ContactsStore, MemoryStore, ScheduleStore, capability
from persyn.store.ports.activity import ActivityPort, remember_harder_entry
from persyn.store.ports.artifacts import ArtifactsPort
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphView
from persyn.tools.builtin.activity import ActivityContext, activity_tools
from persyn.tools.builtin.arithmetic import calculator_tool
from persyn.tools.builtin.artifacts import ArtifactsContext, artifact_tools
from persyn.tools.builtin.attachments import AttachmentsContext, attachment_tools
from persyn.tools.builtin.calls import PhoneLine, call_tools
from persyn.tools.builtin.facts import fact_tools
from persyn.tools.builtin.graph import GraphToolsContext, graph_tools
from persyn.tools.builtin.inspection import SelfInspectionContext, inspection_tools
from persyn.tools.builtin.memory import MemoryToolsContext, memory_tools
from persyn.tools.builtin.outreach import OutreachContext, outreach_tools
from persyn.tools.builtin.own import OwnToolsContext, goal_tools, reminder_tools
from persyn.tools.providers import ToolProvider, ToolScope
from persyn.tools.registry import Tool

__all__ = [
    "ACTIVITY",
    "ARITHMETIC",
    "ARTIFACTS",
    "ATTACHMENTS",
    "FACTS",
    "GRAPH",
    "INSPECTION",
    "MEMORY",
    "OUTREACH",
    "OWN",
    "PROVIDER_TOOLS",
]

_S = TypeVar("_S")


def _own(scope: ToolScope, store: _S) -> OwnToolsContext[_S]:
    return OwnToolsContext(
        store=store,
        agent_id=scope.agent.id,
        clock=scope.clock,
        default_action=scope.here,
        audience=scope.audience,
        run=scope.run,
    )


def _reminders_and_goals(scope: ToolScope) -> list[Tool[Any, Any]]:
    schedule = capability(scope.store, ScheduleStore)
    if schedule is None:  # a store without reminders and goals: no tools for them
        return []
    return [*reminder_tools(_own(scope, schedule)), *goal_tools(_own(scope, schedule))]


async def _shown(scope: ToolScope, provenances: Sequence[Provenance]) -> None:
    await scope.run.read(provenances)


def _facts(scope: ToolScope) -> list[Tool[Any, Any]]:
    memory = capability(scope.store, MemoryStore)
    if memory is None:  # a store without memory: no quick facts
        return []
    return fact_tools(_own(scope, memory), capability(scope.store, ContactsStore))


def _memory(scope: ToolScope) -> list[Tool[Any, Any]]:
    memory = capability(scope.store, MemoryStore)
    if memory is None:  # a store without autobiographical memory: no memory tools
        return []
    return memory_tools(
        MemoryToolsContext(
            store=memory,
            agent_id=scope.agent.id,
            channel=scope.where,
            present=scope.present,
            channel_groups=scope.settings.memory.channel_groups,
            # Raw dialog has no sensitivity of its own: as a confidence of its
            # conversation — this exact channel, only among people who were there.
            dialog_sensitivity=Sensitivity.CONFIDENTIAL,
            remembered=_remembered(scope),
        )
    )


def _remembered(scope: ToolScope) -> Callable[[MemoryRecord, int], Awaitable[None]] | None:
    """Logs the agent remembering harder (`recall_dialog`) in its activity log, if it keeps one."""
    log = capability(scope.store, ActivityPort)
    if log is None:
        return None

    async def remembered(record: MemoryRecord, lines: int) -> None:
        await log.add_activity(
            remember_harder_entry(scope.agent.id, scope.started_at, scope.event_id, record, lines)
        )

    return remembered


def _outreach(scope: ToolScope) -> list[Tool[Any, Any]]:
    contacts = capability(scope.store, ContactsStore)
    if contacts is None:  # a store without the contact directory: no one to find by name
        return []
    messages = outreach_tools(
        OutreachContext(
            store=contacts,
            agent_id=scope.agent.id,
            clock=scope.clock,
            send=scope.send,
            max_messages=scope.settings.autonomy.max_messages_per_run,
            sent=scope.sent,
        )
    )
    line = scope.service(PhoneLine)  # given only when [voice] can place calls
    return messages if line is None else [*messages, *call_tools(contacts, scope.agent.id, line)]


def _activity(scope: ToolScope) -> list[Tool[Any, Any]]:
    async def shown(provenances: Sequence[Provenance]) -> None:
        await _shown(scope, provenances)

    return activity_tools(ActivityContext(source=scope.activity, sees=scope.audience.sees, read=shown))


def _inspection(scope: ToolScope) -> list[Tool[Any, Any]]:
    settings, agent = scope.settings, scope.agent
    return inspection_tools(
        SelfInspectionContext(
            agent_name=agent.name,
            agent_id=agent.id,
            clock=scope.clock,
            models={task.value: settings.model_for(agent, task) for task in Task},
            memory=settings.memory,
            advertised_tools=scope.advertised,
            tools=settings.tools,
            settings={
                "heartbeat_minutes": settings.autonomy.heartbeat_minutes,
                "daily_token_budget": settings.autonomy.daily_token_budget,
            },
            started_at=scope.started_at,
        )
    )


def _graph(scope: ToolScope) -> list[Tool[Any, Any]]:
    settings = scope.settings
    graph = capability(scope.store, GraphPort)
    if not settings.graph.enabled or graph is None:  # a store without the graph: no graph tools
        return []

    async def shown(provenances: Sequence[Provenance]) -> None:
        await _shown(scope, provenances)

    return graph_tools(
        GraphToolsContext(
            store=graph,
            agent_id=scope.agent.id,
            view=GraphView(
                channel=scope.where,
                eligible=eligible_channels(scope.where, settings.memory.channel_groups),
                present=scope.present,
            ),
            read=shown,
            max_relations=settings.graph.max_relations,
            max_path_hops=settings.graph.max_path_hops,
        )
    )


def _artifacts(scope: ToolScope) -> list[Tool[Any, Any]]:
    settings = scope.settings
    artifacts = capability(scope.store, ArtifactsPort)
    if not settings.artifacts.enabled or artifacts is None:  # a store without them: no workspace tools
        return []
    return artifact_tools(
        ArtifactsContext(
            store=artifacts,
            agent_id=scope.agent.id,
            eligible=eligible_channels(scope.where, settings.memory.channel_groups),
            agent_names={a.id: a.name for a in scope.agents.values()},
            clock=scope.clock,
            max_chars=settings.artifacts.max_chars,
        )
    )


def _attachments(scope: ToolScope) -> list[Tool[Any, Any]]:
    settings = scope.settings
    return attachment_tools(
        AttachmentsContext(
            library=AttachmentLibrary(settings.data_dir / "attachments"),
            agent_id=scope.agent.id,
            eligible=eligible_channels(scope.where, settings.memory.channel_groups),
            limits=settings.senses,
        )
    )


def _provider_specs(scope: ToolScope) -> list[ToolSpec]:
    return list(provider_tool_specs(scope.settings, scope.agent))


OWN = ToolProvider("own", _reminders_and_goals)
FACTS = ToolProvider("facts", _facts)
MEMORY = ToolProvider("memory", _memory)
OUTREACH = ToolProvider("outreach", _outreach)
ARITHMETIC = ToolProvider("arithmetic", lambda scope: [calculator_tool()])
ACTIVITY = ToolProvider("activity", _activity)
INSPECTION = ToolProvider("inspection", _inspection)
GRAPH = ToolProvider("graph", _graph)
ARTIFACTS = ToolProvider("artifacts", _artifacts)
ATTACHMENTS = ToolProvider("attachments", _attachments)
PROVIDER_TOOLS = ToolProvider("provider", lambda scope: [], provider_specs=_provider_specs)
