"""Durable execution on DBOS (ARCHITECTURE §3): the workflows, and their steps.

One activation = one workflow, whose id is the event id (a fresh ULID per event), so a
redelivered event never runs twice. A worker killed mid-turn resumes at the last finished
step, without re-billing a model call or transmitting twice. A step may span several model
calls, since the gateway checkpoints each completed call under the step's key
(`gateway.checkpoints`), so the common turn is one step (`persyn.turn`: receive, draft,
decision, transmit). Tool calls, critique, refinement, engagement and a heartbeat's
assessment are steps of their own.

The workflows and steps are methods of `Workflows`, a DBOS configured instance that only
declares them: what a turn does, in which order, is `TurnPolicy`'s (`runtime/turn/policy.py`),
called with the steps as its `DurableTurn`. DBOS records the instance's name
(`dispatch.WORKFLOWS_CLASS` / `WORKFLOWS_INSTANCE`) with every workflow and hands that instance
to it when a queue worker claims it or recovery resumes it, in whichever process. So the
workflows reach their collaborators as typed attributes of `self`, given by the composition
root, with no module-level locator; a process that only submits (`persyn send`) enqueues by
those names through a `DBOSClient`. The one workflow that is not a method is the schedule's
tick (a DBOS schedule names no instance): it enqueues the instance's `fire_due` by name.

Steps are `durable_step`s: typed in and out, checkpointed as plain JSON (`runtime.durable`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from dbos import DBOS, DBOSConfiguredInstance, EnqueueOptions

from persyn.cognition.deliberation import CritiqueOutcome, Decision
from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.reflection import SelfAssessment
from persyn.core.errors import InputError, is_storage_full
from persyn.core.ids import derived_id
from persyn.gateway.base import Prompt, ToolCall
from persyn.runtime.durable._instance import release_instance
from persyn.runtime.durable._storage_full import UnansweredRecorder, end_on_full_storage, ends_on_full_storage
from persyn.runtime.durable.dispatch import (
    BACKGROUND_QUEUE,
    EVENTS_QUEUE,
    WORKFLOWS_CLASS,
    WORKFLOWS_INSTANCE,
    Dispatcher,
    WorkerDispatcher,
    deliberation_workflow_id,
    emotion_workflow_id,
    extraction_workflow_id,
)
from persyn.runtime.durable.steps import (
    APPLICATION_VERSION,
    durable_step,
    durable_workflow,
    step_key,
    workflow_result,
)
from persyn.runtime.turn.activation import ActivationSteps
from persyn.runtime.turn.images import ImageNews, ImageService, render_workflow_id
from persyn.runtime.turn.models import (
    AUTO_SPEAK,
    ClosedRun,
    Deferred,
    Draft,
    RoundTrip,
    TransmitRequest,
    TransmitResult,
    Turned,
)
from persyn.runtime.turn.policy import TurnPolicy
from persyn.runtime.turn.tool_steps import ToolSteps, run_durable_tool_loop
from persyn.store.base import Conversation
from persyn.tools.registry import ToolOutcome
from persyn.tracing import Tracing, TurnSpan
from persyn.usage.context import Attribution, bind, rebind

__all__ = [
    "ACTIVATION",
    "AUTO_SPEAK",
    "BACKGROUND_QUEUE",
    "EVENTS_QUEUE",
    "BackgroundJobs",
    "Workflows",
    "activation_result",
    "scheduler_tick",
]


log = logging.getLogger(__name__)

ACTIVATION = "persyn.activation"


def activation_result(output: object) -> TransmitResult:
    """How an activation ended, from its recorded output (a handle's `get_result()`)."""
    result: TransmitResult = workflow_result(ACTIVATION, output)
    return result


class Transmitter(UnansweredRecorder, Protocol):
    """Acts on the decision: delivers, or records why not (SPEC §4 step 7)."""

    async def transmit(
        self, agent_id: str, event_id: str, setup: TurnSetup, outcome: TransmitRequest
    ) -> TransmitResult: ...


class BackgroundJobs(Protocol):
    """Close hooks and incremental extraction of conversations."""

    def extraction_due(self, conversation_id: str, new_messages: int) -> bool: ...

    def extraction_names(self) -> list[str]: ...

    async def run_extraction(self, agent_id: str, conversation_id: str, name: str) -> None: ...

    def conversation_hook_names(self) -> list[str]: ...

    async def run_conversation_hook(self, agent_id: str, conversation_id: str, name: str) -> None: ...

    async def enqueue_close_hooks(
        self, conversation: Conversation, *, trace_parent: str | None = None
    ) -> bool:
        """Under the conversation's one derived workflow id (`conversation_jobs`); `trace_parent`
        joins the hooks' spans to the trace of the turn that closed it."""
        ...


class ReminderFiring(Protocol):
    async def fire_due(self, *, from_step: bool = False) -> int: ...


@DBOS.dbos_class(WORKFLOWS_CLASS)
class Workflows(DBOSConfiguredInstance):
    """Every Persyn workflow, bound to the collaborators of one runtime."""

    def __init__(
        self,
        *,
        steps: ActivationSteps,
        tools: ToolSteps,
        transmitter: Transmitter,
        jobs: BackgroundJobs,
        reminders: ReminderFiring,
        tracing: Tracing,
        transmit_delay: float = 0.0,
        images: ImageService | None = None,
    ) -> None:
        self.images = images  # `[images]` configured: the background render (§21)
        self.steps = steps
        self.tools = tools
        self.transmitter = transmitter
        self.jobs = jobs
        self.reminders = reminders
        self.tracing = tracing
        self.policy = TurnPolicy(steps, jobs, transmit_delay=transmit_delay)
        self.dispatcher: Dispatcher | None = None  # the worker's, set when workers start
        release_instance(WORKFLOWS_CLASS, WORKFLOWS_INSTANCE)  # the newest runtime runs them
        super().__init__(WORKFLOWS_INSTANCE)

    def _dispatcher(self) -> Dispatcher:
        if self.dispatcher is None:
            raise RuntimeError("the Persyn workers are not started in this process")
        return self.dispatcher

    # the activation (SPEC §4) -----------------------------------------------------------------
    @durable_workflow(ACTIVATION)
    async def activation(self, agent_id: str, event_id: str) -> TransmitResult:
        """receive + respond (overheard: receive → engage → respond; heartbeat: receive →
        assess → respond) → tool loop → (critique → refine) → decide → transmit.

        The order is `TurnPolicy`'s (`runtime/turn/policy.py`); this class makes its
        operations durable. The common path runs whole in the turn step (`turn_step`). Inline
        mode critiques and refines before deciding on the draft. Deferred mode, where a person
        waits, decides on the input concurrently with the draft inside the turn
        step (when the input is substantive: `ActivationSteps.decides_on_input`), so only the
        deterministic gates stand between the draft and transmit; a silence or a refusal
        decided on the input still replaces the draft there. It then hands critique and
        refinement to `deliberation` on the background queue, whose conclusion the next turn
        on the channel weaves in.

        A turn the storage refused (a full disk) ends unanswered once that is recorded,
        instead of staying pending and being replayed (`runtime/durable/_storage_full.py`)."""
        self._count_running()
        try:
            return await self._run_activation(agent_id, event_id)
        except Exception as exc:
            if not is_storage_full(exc):
                raise
            return await end_on_full_storage(self.transmitter, agent_id, event_id, exc)

    async def _trigger(self, agent_id: str, event_id: str) -> str | None:
        """What set this activation going (a message, the heartbeat, a reminder: the event's
        kind) for the usage records: the event the turn reads anyway, through its cache."""
        try:
            return (await self.steps.cache.event(agent_id, event_id)).kind.value
        except InputError:  # not stored: the turn says so itself
            return None

    async def _run_activation(self, agent_id: str, event_id: str) -> TransmitResult:
        trigger = await self._trigger(agent_id, event_id)
        with (
            bind(Attribution(agent_id=agent_id, thread_id=DBOS.workflow_id, trigger=trigger)),
            self.tracing.activation(agent_id, event_id, DBOS.workflow_id) as turn,
        ):
            turned = await self.turn_step(agent_id, event_id)
            setup = turned.received.setup
            await self._trace_setup(turn, setup)
            with rebind(surface=setup.service, channel=setup.channel, conversation_id=setup.conversation_id):
                result = await self.policy.activate(_DurableTurn(self), turned)
            turn.outcome(
                transmitted=result.transmitted, action=result.action, text=result.text, reason=result.reason
            )
            return result

    async def _trace_setup(self, turn: TurnSpan, setup: TurnSetup) -> None:
        """Who and what the turn serves, on its root span (SPEC App. D grouping)."""
        turn.setup(
            kind=setup.kind,
            surface=setup.service,
            channel=setup.channel,
            participant=setup.person_id,
            participant_name=setup.speaker_name,
            conversation_id=setup.conversation_id,
            mode=setup.mode,
        )
        if turn.wants_input:  # the event is cached for the turn: no store read
            turn.input((await self.steps.cache.event(setup.agent_id, setup.event_id)).text)

    def _count_running(self) -> None:
        """Count this activation as running here (woken polls batch while any is) and, when
        its task ends (DBOS has recorded its outcome and released its slot), wake the queue: the
        agent's next event, held back by the per-agent partition lock, can start now instead of
        at the next poll."""
        task = asyncio.current_task()
        dispatcher = self.dispatcher
        if task is None or not isinstance(dispatcher, WorkerDispatcher):
            return
        dispatcher.activation_started(DBOS.workflow_id or "")
        task.add_done_callback(lambda _task: dispatcher.activation_ended())

    async def _deliberate_later(self, setup: TurnSetup, draft: Draft, feel: bool) -> None:
        deferred = Deferred(
            setup=setup, draft=draft, trace_parent=self.tracing.carrier(), feel=feel
        ).model_dump_json()
        await self._dispatcher().enqueue_once(
            BACKGROUND_QUEUE,
            self.deliberation,
            deliberation_workflow_id(setup.event_id),
            setup.agent_id,
            setup.event_id,
            deferred,
        )

    @DBOS.workflow(name="persyn.deliberation")
    @ends_on_full_storage
    async def deliberation(self, agent_id: str, event_id: str, deferred: str) -> None:
        """Deferred critique + refinement of a reply already sent; attributed to its
        conversation. `deferred` is a `Deferred` as JSON (a plain-JSON checkpoint)."""
        given = Deferred.model_validate_json(deferred)
        setup, draft = given.setup, given.draft
        with (
            bind(
                Attribution(
                    agent_id=agent_id,
                    thread_id=DBOS.workflow_id,
                    surface=setup.service,
                    channel=setup.channel,
                    conversation_id=setup.conversation_id,
                    trigger=setup.kind,
                )
            ),
            self.tracing.background(
                "deliberation",
                parent=given.trace_parent,
                agent_id=agent_id,
                conversation_id=setup.conversation_id,
                event_id=event_id,
            ),
        ):
            turn = _DurableTurn(self, trace_parent=given.trace_parent)
            await self.policy.deliberate(turn, setup, draft, feel=given.feel)

    async def _tool_loop(self, setup: TurnSetup, draft: Draft) -> Draft:
        """Every model round-trip and every tool call of the loop is its own durable step."""
        agent_id, event_id = setup.agent_id, setup.event_id

        async def respond_more(prompt: Prompt) -> RoundTrip:
            return await self.respond_more_step(agent_id, event_id, setup, prompt)

        async def tool_call(call: ToolCall) -> ToolOutcome:
            outcome = await self.tool_call_step(agent_id, event_id, setup, call)
            await self._render_later(agent_id, outcome)
            return outcome

        return await run_durable_tool_loop(self.tools, setup, draft, respond_more, tool_call)

    async def _render_later(self, agent_id: str, outcome: ToolOutcome) -> None:
        """An image tool asked for a render: it runs on the background queue. Enqueued here,
        in the workflow, because DBOS starts no workflow from inside a step; a recovered
        activation enqueues the same id again, which attaches to the first."""
        reference = self.images.started(outcome) if self.images is not None else None
        if reference is None:
            return
        await self._dispatcher().enqueue_once(
            BACKGROUND_QUEUE,
            self.render_image,
            render_workflow_id(reference),
            agent_id,
            reference,
            self.tracing.carrier(),
        )

    @DBOS.workflow(name="persyn.render_image")
    @ends_on_full_storage
    async def render_image(self, agent_id: str, reference: str, trace_parent: str | None = None) -> None:
        """An image asked for by `generate_image` / `edit_image`: rendered, then delivered
        to the conversation that asked (`runtime/turn/images.py`)."""
        with self.tracing.background("image", parent=trace_parent, agent_id=agent_id):
            news = await self.render_image_step(agent_id, reference)
            if news is None:
                return
            await self._activation_ended(news.job.thread_id)
            await self.deliver_image_step(agent_id, news)

    async def _activation_ended(self, event_id: str) -> None:
        """Until the activation that asked for an image has ended, so the news follows the
        reply that promised it ("I am drawing it") rather than overtaking it. The render
        itself ran meanwhile. An activation that failed, or is unknown, holds nothing up."""
        try:
            handle = await DBOS.retrieve_workflow_async(event_id)
            await handle.get_result()
        except Exception as exc:
            log.info("image news after activation %s, which ended with %r", event_id, exc)

    @durable_step("persyn.render_image_step")
    async def render_image_step(self, agent_id: str, reference: str) -> ImageNews | None:
        if self.images is None:
            log.warning("image %s of agent %s: [images] is no longer configured", reference, agent_id)
            return None
        return await self.images.render(reference)

    @durable_step("persyn.deliver_image")
    async def deliver_image_step(self, agent_id: str, news: ImageNews) -> None:
        if self.images is not None:
            await self.images.deliver(news)

    async def _close_run(self, setup: TurnSetup, result: TransmitResult) -> None:
        """Log, close and consolidate a self-initiated run's conversation (its close hooks, enqueued
        under the id the idle close and the sweep derive too: consolidated once)."""
        closed = await self.finish_run_step(setup.agent_id, setup.event_id, setup, result)
        if closed is not None:
            await self.jobs.enqueue_close_hooks(closed.conversation, trace_parent=self.tracing.carrier())

    async def _extract_later(self, setup: TurnSetup) -> None:
        """Read what is new of an open conversation for observations and the graph, off the
        critical path (`TurnPolicy.after_transmit` says when)."""
        await self._dispatcher().enqueue_once(
            BACKGROUND_QUEUE,
            self.extract,
            extraction_workflow_id(setup.event_id),
            setup.agent_id,
            setup.conversation_id,
            self.tracing.carrier(),
        )

    async def _feel_later(self, setup: TurnSetup) -> None:
        """The agent's emotional state (SPEC §4.9) on the background queue: off the reply's
        path and outside the agent's lock."""
        await self._dispatcher().enqueue_once(
            BACKGROUND_QUEUE,
            self.feel,
            emotion_workflow_id(setup.event_id),
            setup.agent_id,
            setup.event_id,
            setup.conversation_id,
            self.tracing.carrier(),
            setup.service,
            setup.channel,
        )

    @DBOS.workflow(name="persyn.feel")
    @ends_on_full_storage
    async def feel(
        self,
        agent_id: str,
        event_id: str,
        conversation_id: str,
        trace_parent: str | None = None,
        surface: str | None = None,
        channel: str | None = None,
    ) -> None:
        """The emotion classifier after an exchange, attributed to its conversation (its surface
        and channel given by the activation; read only for a reading enqueued without them)."""
        if surface is None or channel is None:
            conversation = await self.steps.store.get_conversation(agent_id, conversation_id)
            surface = conversation.service if conversation else None
            channel = conversation.channel if conversation else None
        with (
            bind(
                Attribution(
                    agent_id=agent_id,
                    thread_id=DBOS.workflow_id,
                    surface=surface,
                    channel=channel,
                    conversation_id=conversation_id,
                    trigger="emotion",
                )
            ),
            self.tracing.background(
                "emotion",
                parent=trace_parent,
                agent_id=agent_id,
                conversation_id=conversation_id,
                event_id=event_id,
            ),
        ):
            await self.feel_step(agent_id, event_id, conversation_id)

    async def _feel_here(self, setup: TurnSetup, trace_parent: str | None) -> None:
        """The emotion reading as the deferred deliberation's last step, attributed as
        `persyn.feel` attributes it (trigger `emotion`), under a span of its own beside the
        deliberation's, in the turn's trace (`trace_parent`)."""
        with (
            rebind(trigger="emotion"),
            self.tracing.background(
                "emotion",
                parent=trace_parent,
                agent_id=setup.agent_id,
                conversation_id=setup.conversation_id,
                event_id=setup.event_id,
            ),
        ):
            await self.feel_step(setup.agent_id, setup.event_id, setup.conversation_id)

    # the activation's steps -------------------------------------------------------------------
    @durable_step("persyn.turn")
    async def turn_step(self, agent_id: str, event_id: str) -> Turned:
        """receive, then (when the message is for the agent) respond, and on the common path
        (`TurnPolicy.in_turn_step`: no tool calls) inline critique and refinement, the decision
        on the draft when it needs one and transmit: one step, one DBOS checkpoint. Re-running
        it after a crash is safe: the gateway checkpointed each completed model call under this step's key
        (`gateway.checkpoints`), so a re-run replays them instead of calling and billing
        again; receive's inbound message id is derived from the event; transmit records one
        reply per event (a re-run finds it stored) and its outbox row under the event's key."""
        received = await self.steps.receive_and_respond(agent_id, event_id)

        async def transmit(request: TransmitRequest) -> TransmitResult:
            return await self.transmitter.transmit(agent_id, event_id, received.setup, request)

        return await self.policy.in_turn_step(received, transmit)

    @durable_step("persyn.engage")
    async def engage_step(self, agent_id: str, event_id: str, setup: TurnSetup) -> Decision:
        return await self.steps.engage(agent_id, event_id, setup)

    @durable_step("persyn.respond")
    async def respond_step(self, agent_id: str, event_id: str, setup: TurnSetup) -> Draft:
        return await self.steps.respond(agent_id, event_id, setup)

    @durable_step("persyn.critique")
    async def critique_step(
        self, agent_id: str, event_id: str, setup: TurnSetup, draft: Draft
    ) -> tuple[CritiqueOutcome, ...]:
        return await self.steps.critique(agent_id, event_id, setup, draft)

    @durable_step("persyn.refine")
    async def refine_step(
        self, agent_id: str, event_id: str, draft: Draft, critiques: Sequence[CritiqueOutcome], live: bool
    ) -> str | None:
        return await self.steps.refine(agent_id, event_id, draft, critiques, live=live)

    @durable_step("persyn.decide")
    async def decide_step(self, agent_id: str, event_id: str, setup: TurnSetup, text: str) -> Decision:
        return await self.steps.decide(agent_id, event_id, setup, text)

    @durable_step("persyn.transmit", bind_key=False)
    async def transmit_step(
        self, agent_id: str, event_id: str, setup: TurnSetup, request: TransmitRequest
    ) -> TransmitResult:
        return await self.transmitter.transmit(agent_id, event_id, setup, request)

    @durable_step("persyn.park", bind_key=False)
    async def park_step(
        self,
        agent_id: str,
        event_id: str,
        setup: TurnSetup,
        draft: Draft,
        critiques: Sequence[CritiqueOutcome],
        revised: str | None,
    ) -> None:
        await self.steps.park(agent_id, event_id, setup, draft, critiques, revised)

    @durable_step("persyn.respond_more")
    async def respond_more_step(
        self, agent_id: str, event_id: str, setup: TurnSetup, prompt: Prompt
    ) -> RoundTrip:
        return await self.tools.continue_respond(agent_id, event_id, setup, prompt)

    @durable_step("persyn.tool_call", bind_key=False)
    async def tool_call_step(
        self, agent_id: str, event_id: str, setup: TurnSetup, call: ToolCall
    ) -> ToolOutcome:
        # The step's identity (workflow and position) is what a re-run of this very call shares
        # with its first run, and what no other call has: the per-run caps count by it.
        return await self.tools.run_tool(agent_id, event_id, setup, call, call_key=step_key())

    @durable_step("persyn.feel_step")
    async def feel_step(self, agent_id: str, event_id: str, conversation_id: str) -> None:
        await self.steps.feel(agent_id, event_id, conversation_id)

    @durable_step("persyn.assess")
    async def assess_step(self, agent_id: str, event_id: str, setup: TurnSetup) -> SelfAssessment:
        return await self.steps.assess(agent_id, event_id, setup)

    @durable_step("persyn.finish_run", bind_key=False)
    async def finish_run_step(
        self, agent_id: str, event_id: str, setup: TurnSetup, result: TransmitResult
    ) -> ClosedRun | None:
        return await self.steps.finish_run(agent_id, event_id, setup, result)

    # reminders and the heartbeat (SPEC §4.7) ----------------------------------------------------
    @durable_step("persyn.fire_due", bind_key=False)
    async def fire_due_step(self) -> int:
        return await self.reminders.fire_due(from_step=True)

    @DBOS.workflow(name="persyn.fire_due_tick")
    @ends_on_full_storage
    async def fire_due(self) -> None:
        """Fire due reminders. Each firing is an event with a dedup id derived from
        `reminder_id@fire_time`, so a tick that runs twice, or in several processes, still
        fires each reminder once."""
        await self.fire_due_step()

    # conversation jobs ----------------------------------------------------------------------
    @durable_step("persyn.extract_step")
    async def extract_step(self, agent_id: str, conversation_id: str, hook_name: str) -> None:
        await self.jobs.run_extraction(agent_id, conversation_id, hook_name)

    @DBOS.workflow(name="persyn.extract")
    @ends_on_full_storage
    async def extract(self, agent_id: str, conversation_id: str, trace_parent: str | None = None) -> None:
        """Incremental observations and graph extraction for an open conversation, in the
        trace of the turn that triggered it (`trace_parent`)."""
        with (
            bind(
                Attribution(
                    agent_id=agent_id,
                    thread_id=DBOS.workflow_id,
                    conversation_id=conversation_id,
                    trigger="extraction",
                )
            ),
            self.tracing.background(
                "extraction", parent=trace_parent, agent_id=agent_id, conversation_id=conversation_id
            ),
        ):
            for hook_name in self.jobs.extraction_names():
                await self.extract_step(agent_id, conversation_id, hook_name)

    @durable_step("persyn.conversation_hook")
    async def conversation_hook_step(self, agent_id: str, conversation_id: str, hook_name: str) -> None:
        await self.jobs.run_conversation_hook(agent_id, conversation_id, hook_name)

    @DBOS.workflow(name="persyn.consolidation_retry")
    @ends_on_full_storage
    async def consolidation_retry(self, agent_id: str, conversation_id: str) -> None:
        """A failed consolidation tried again (enqueued by the housekeeping sweep when due,
        under a fresh id per attempt: `conversation_jobs.consolidation_retry_id`)."""
        with (
            bind(
                Attribution(
                    agent_id=agent_id,
                    thread_id=DBOS.workflow_id,
                    conversation_id=conversation_id,
                    trigger="consolidation",
                )
            ),
            self.tracing.background(
                "consolidation retry", parent=None, agent_id=agent_id, conversation_id=conversation_id
            ),
        ):
            await self.conversation_hook_step(agent_id, conversation_id, "consolidate")

    @DBOS.workflow(name="persyn.conversation_closed")
    @ends_on_full_storage
    async def conversation_closed(
        self, agent_id: str, conversation_id: str, trace_parent: str | None = None
    ) -> None:
        """Runs on the background queue after a conversation closes: each registered hook
        (consolidation, later) is a durable step, so a crash between close and hook loses
        nothing. A run that closed its own conversation passes its trace (`trace_parent`); an
        idle close has no turn, and gets a trace of its own."""
        with (
            bind(
                Attribution(
                    agent_id=agent_id,
                    thread_id=DBOS.workflow_id,
                    conversation_id=conversation_id,
                    trigger="consolidation",
                )
            ),
            self.tracing.background(
                "conversation closed", parent=trace_parent, agent_id=agent_id, conversation_id=conversation_id
            ),
        ):
            for hook_name in self.jobs.conversation_hook_names():
                await self.conversation_hook_step(agent_id, conversation_id, hook_name)


class _DurableTurn:
    """The turn's operations as `TurnPolicy` asks for them (`DurableTurn`), each one of the
    instance's durable steps, or a background workflow it enqueues once."""

    def __init__(self, workflows: Workflows, *, trace_parent: str | None = None) -> None:
        self._workflows = workflows
        self._trace_parent = trace_parent  # the turn's span, for background work run here

    async def engage(self, setup: TurnSetup) -> Decision:
        return await self._workflows.engage_step(setup.agent_id, setup.event_id, setup)

    async def respond(self, setup: TurnSetup) -> Draft:
        return await self._workflows.respond_step(setup.agent_id, setup.event_id, setup)

    async def assess(self, setup: TurnSetup) -> SelfAssessment:
        return await self._workflows.assess_step(setup.agent_id, setup.event_id, setup)

    async def tool_loop(self, setup: TurnSetup, draft: Draft) -> Draft:
        return await self._workflows._tool_loop(setup, draft)

    async def critique(self, setup: TurnSetup, draft: Draft) -> tuple[CritiqueOutcome, ...]:
        return await self._workflows.critique_step(setup.agent_id, setup.event_id, setup, draft)

    async def refine(
        self, setup: TurnSetup, draft: Draft, critiques: Sequence[CritiqueOutcome]
    ) -> str | None:
        return await self._workflows.refine_step(setup.agent_id, setup.event_id, draft, critiques, True)

    async def decide(self, setup: TurnSetup, text: str) -> Decision:
        return await self._workflows.decide_step(setup.agent_id, setup.event_id, setup, text)

    async def transmit(self, setup: TurnSetup, request: TransmitRequest) -> TransmitResult:
        return await self._workflows.transmit_step(setup.agent_id, setup.event_id, setup, request)

    async def park(
        self, setup: TurnSetup, draft: Draft, critiques: Sequence[CritiqueOutcome], revised: str | None
    ) -> None:
        await self._workflows.park_step(setup.agent_id, setup.event_id, setup, draft, critiques, revised)

    async def finish_run(self, setup: TurnSetup, result: TransmitResult) -> None:
        await self._workflows._close_run(setup, result)

    async def deliberate_later(self, setup: TurnSetup, draft: Draft, *, feel: bool = False) -> None:
        await self._workflows._deliberate_later(setup, draft, feel)

    async def extract_later(self, setup: TurnSetup) -> None:
        await self._workflows._extract_later(setup)

    async def feel_later(self, setup: TurnSetup) -> None:
        await self._workflows._feel_later(setup)

    async def feel(self, setup: TurnSetup) -> None:
        await self._workflows._feel_here(setup, self._trace_parent)


@DBOS.workflow(name="persyn.scheduler_tick")
async def scheduler_tick(scheduled_at: datetime, context: Any) -> None:
    """The DBOS schedule's tick (every `[autonomy] tick_seconds`). A schedule names no
    configured instance, so the tick enqueues the instance's `fire_due` by name, under an id
    derived from the tick (a replayed tick attaches to the same one)."""
    options: EnqueueOptions = {
        "workflow_name": "persyn.fire_due_tick",
        "queue_name": BACKGROUND_QUEUE,
        "workflow_id": derived_id(scheduled_at, DBOS.workflow_id or "", "fire"),
        "class_name": WORKFLOWS_CLASS,
        "instance_name": WORKFLOWS_INSTANCE,
        "app_version": APPLICATION_VERSION,
    }
    await DBOS.enqueue_workflow_with_options_async(options)
