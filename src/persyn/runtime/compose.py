"""The composition root (ARCHITECTURE §2): every collaborator, wired explicitly.

`build_runtime` is the one place that decides what talks to what. Everything it builds
receives its collaborators as constructor arguments (typed by small protocols where they are
someone else's), so a test injects a store, a clock, meter adapters or channel adapters here
and nothing reaches around it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta

from opentelemetry.sdk.trace.export import SpanExporter

from persyn.cognition.emotion import EmotionSource
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.core.clock import Clock, SystemClock
from persyn.core.config import Settings, images_api_key, mcp_headers
from persyn.core.events import Event
from persyn.gateway.auto import resolve_auto
from persyn.gateway.gateway import ModelGateway
from persyn.runtime.app import Runtime, RuntimeParts
from persyn.runtime.background.autonomy import Autonomy
from persyn.runtime.background.calls import Calls
from persyn.runtime.background.conversation_jobs import ConversationJobs, JobQueue, JobWorkflows
from persyn.runtime.background.guardrails import Guardrails
from persyn.runtime.background.housekeeping import Housekeeping
from persyn.runtime.background.outreach import Outreach
from persyn.runtime.background.reminder_timer import ReminderTimer
from persyn.runtime.channel import Channel
from persyn.runtime.delivery.outbox import Outbox
from persyn.runtime.durable.dispatch import Intake, Markers
from persyn.runtime.durable.workflows import Workflows
from persyn.runtime.local_models import LocalModels
from persyn.runtime.turn.activation import ActivationSteps, ReplyBudget, TurnCache
from persyn.runtime.turn.agent_tools import AgentToolDeps
from persyn.runtime.turn.images import ImageService
from persyn.runtime.turn.live import LiveVoice
from persyn.runtime.turn.pacing import Pacing
from persyn.runtime.turn.senses import Senses
from persyn.runtime.turn.tool_steps import ToolSteps
from persyn.runtime.turn.transmit import Transmitter
from persyn.store import Store, open_store
from persyn.tools.mcp.servers import McpTools
from persyn.tools.sandbox.service import SandboxService
from persyn.tracing import Tracing
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.meter import Meter, MeterAdapter
from persyn.usage.prometheus import PrometheusAdapter

__all__ = ["build_runtime"]


def build_runtime(
    settings: Settings,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    channels: Mapping[str, Channel] | None = None,
    meter_adapters: Iterable[MeterAdapter] = (),
    span_exporters: Iterable[SpanExporter] = (),
) -> Runtime:
    """A runtime for `settings`: the store at `database_url` unless one is given, the system
    clock unless one is given, the configured meter adapters plus `meter_adapters`, the
    configured span exporters plus `span_exporters` (used when `[tracing] enabled`), and the
    channel adapters by service (more may be connected before `start`).

    Built in dependency order, each part from the ones before it. The one exception is the
    conversation jobs' queue: the workflows run the jobs, and the jobs enqueue workflows, so
    the queue is bound to the workflows once they exist (`JobQueue.bind`), before this returns.
    `auto` is resolved here, once, before any collaborator reads a model string
    (`gateway/auto.py`)."""
    settings, auto = resolve_auto(settings)
    clock = clock or SystemClock()
    store = store or open_store(settings.database_url)
    adapters: list[MeterAdapter] = []
    if settings.metering.event_log:
        adapters.append(JsonlAdapter(settings.usage_log_path))
    prometheus: PrometheusAdapter | None = None
    if settings.metering.prometheus_port:
        prometheus = PrometheusAdapter()
        adapters.append(prometheus)
    adapters.extend(meter_adapters)
    tracing = Tracing(settings.tracing, directory=settings.traces_dir, exporters=tuple(span_exporters))
    agents = {agent.id: agent for agent in settings.agents}
    gateways: dict[str, ModelGateway] = {}  # built at start, once local models run
    connected: dict[str, Channel] = dict(channels or {})
    cache = TurnCache(store, settings)
    # the rest join at start
    sources: list[ContextSource] = [EmotionSource(store, settings.emotion, readings=cache.emotions)]
    markers = Markers(store, clock, in_flight=lambda event_id: cache.known(event_id) is not None)
    intake = Intake(store, settings, cache)
    autonomy = Autonomy(store, clock, settings, agents.keys(), _RunHost(intake, cache))
    job_queue = JobQueue()
    jobs = ConversationJobs(
        settings, store=store, clock=clock, agents=agents, gateway=gateways.__getitem__, queue=job_queue
    )
    outbox = Outbox(store, clock, connected.get, keep=timedelta(days=settings.dispatch.outbox_keep_days))
    guardrails = Guardrails(
        settings,
        store=store,
        clock=clock,
        agents=agents,
        gateway=gateways.__getitem__,
        outbox=outbox,
        conversation_closed=jobs.enqueue_close_hooks,
    )
    housekeeping = Housekeeping(
        settings, store=store, clock=clock, agents=agents, jobs=jobs, guardrails=guardrails
    )
    # No reminders, or no activity log to keep the budget with: nothing ever fires.
    watch, reminders = settings.autonomy.watch_seconds, autonomy.schedule
    reminder_timer = (
        ReminderTimer(reminders, list(agents), clock, autonomy.fire_due, watch)
        if reminders is not None and autonomy.activity is not None and watch > 0
        else None
    )
    outreach = Outreach(
        store=store,
        settings=settings,
        clock=clock,
        agents=agents,
        outbox=outbox,
        event_of=cache.event,
        validate_text=intake.validate_text,
        connected=connected.__contains__,
        guardrails=guardrails,
        channels=connected.get,
    )
    pacing = Pacing(
        store=store,
        settings=settings,
        clock=clock,
        reply_budget_spent=outreach.reply_budget_spent,
        queued_events=intake.queued_events,
        event_of=cache.event,
    )
    meter = Meter(adapters)
    images: ImageService | None = None
    if settings.images.enabled:
        images = ImageService(
            settings,
            store=store,
            clock=clock,
            agents=agents,
            outbox=outbox,
            admit=autonomy.admit_call,
            meter=meter,
            api_key=images_api_key(settings),
        )
        outbox.images = images.attachments
    transmitter = Transmitter(
        store=store,
        settings=settings,
        clock=clock,
        agents=agents,
        channels=connected.get,
        outbox=outbox,
        outreach=outreach,
        cache=cache,
        markers=markers,
        runs=autonomy,
        pacing=pacing,
        guardrails=guardrails,
    )
    tools = ToolSteps(
        settings=settings,
        gateways=gateways,
        channels=connected,
        deps=AgentToolDeps(
            store=store,
            clock=clock,
            settings=settings,
            agents=agents,
            outreach=outreach,
            mcp=McpTools(settings.mcp, mcp_headers(settings), log_dir=settings.logs_dir)
            if settings.mcp.servers
            else None,
            sandbox=SandboxService(settings, gateways) if settings.sandbox.enabled else None,
            images=images,
            calls=Calls(
                store=store,
                settings=settings,
                clock=clock,
                outreach=outreach,
                autonomy=autonomy,
                channels=connected,
            ),
        ),
        event=cache.event,
        tracing=tracing,
    )
    steps = ActivationSteps(
        settings=settings,
        store=store,
        clock=clock,
        agents=agents,
        gateways=gateways,
        channels=connected,
        context_sources=sources,
        cache=cache,
        tools=tools,
        reply_budget_spent=_first_reason(guardrails.blocked_reason, pacing.blocked),
        runs=autonomy,
    )
    workflows = Workflows(
        steps=steps,
        tools=tools,
        transmitter=transmitter,
        jobs=jobs,
        reminders=autonomy,
        tracing=tracing,
        transmit_delay=settings.dispatch.debug_transmit_delay_seconds,
        images=images,
    )
    job_queue.bind(
        JobWorkflows(
            close_hooks=workflows.conversation_closed, consolidation_retry=workflows.consolidation_retry
        )
    )
    parts = RuntimeParts(
        cache=cache,
        markers=markers,
        intake=intake,
        autonomy=autonomy,
        local_models=LocalModels(settings, auto),
        gateways=gateways,
        channels=connected,
        context_sources=sources,
        jobs=jobs,
        job_queue=job_queue,
        housekeeping=housekeeping,
        reminder_timer=reminder_timer,
        outbox=outbox,
        outreach=outreach,
        transmitter=transmitter,
        activation=steps,
        tools=tools,
        workflows=workflows,
        tracing=tracing,
        senses=Senses(settings, gateways),
        live=LiveVoice(
            store=store,
            settings=settings,
            clock=clock,
            agents=agents,
            gateways=gateways,
            context_sources=sources,
            # The hard gates of a live call (SPEC Appendix A): a guardrail's block, the
            # channel's reply budget; never pacing's turn-taking nor the engagement decision.
            blocked=_first_reason(guardrails.blocked_reason, outreach.reply_budget_spent),
            spend=outreach.reply_entry,
        ),
    )
    return Runtime(settings, clock=clock, store=store, meter=meter, prometheus=prometheus, parts=parts)


def _first_reason(*checks: ReplyBudget) -> ReplyBudget:
    """One reply-budget check from several, in order: the first reason a turn gets no draft
    (a guardrail's block, then pacing), so a blocked person costs no model call."""

    async def check(setup: TurnSetup) -> str | None:
        for one in checks:
            reason = await one(setup)
            if reason is not None:
                return reason
        return None

    return check


class _RunHost:
    """What autonomy needs of dispatch: submitting events, busy agents, events at hand."""

    def __init__(self, intake: Intake, cache: TurnCache) -> None:
        self._intake = intake
        self._cache = cache

    async def submit(self, event: Event, *, from_step: bool = False) -> str:
        return await self._intake.submit(event, from_step=from_step)

    async def busy(self, agent_id: str) -> bool:
        return await self._intake.busy(agent_id)

    def known_event(self, event_id: str) -> Event | None:
        return self._cache.known(event_id)
