"""The turn's policy (SPEC §4): which steps an activation takes, in what order, and what follows
its transmit.

The DBOS class (`runtime/durable/workflows.py`) declares the steps and the workflows and asks
this module what to do; this module decides and knows nothing of DBOS. On the workflow's path each
operation it asks for goes through `DurableTurn`, where it is a DBOS step (or a background workflow
enqueued once); inside the turn step (`in_turn_step`) it calls `ActivationSteps` and the transmit
directly, since the whole step is one checkpoint.

A workflow recovered after a crash replays its recorded steps by their order, so the order in which
`activate`, `after_transmit` and `deliberate` make their durable calls is part of the step protocol:
change it only with `STEP_PROTOCOL_VERSION` (`runtime/durable/steps.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from persyn.cognition.deliberation import CritiqueOutcome, Decision
from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.reflection import SelfAssessment
from persyn.runtime.turn.activation import ActivationSteps
from persyn.runtime.turn.models import AUTO_SPEAK, Draft, Received, TransmitRequest, TransmitResult, Turned
from persyn.usage.context import rebind

__all__ = ["DurableTurn", "ExtractionTrigger", "TurnPolicy"]


class DurableTurn(Protocol):
    """What the policy asks of durable execution for one activation: each call is a checkpointed
    step, and the `*_later` calls start a background workflow once (under an id derived from the
    event, so a replay attaches to the first)."""

    async def engage(self, setup: TurnSetup) -> Decision: ...

    async def respond(self, setup: TurnSetup) -> Draft: ...

    async def assess(self, setup: TurnSetup) -> SelfAssessment: ...

    async def tool_loop(self, setup: TurnSetup, draft: Draft) -> Draft:
        """Every model round-trip and every tool call of the loop is its own step."""
        ...

    async def critique(self, setup: TurnSetup, draft: Draft) -> tuple[CritiqueOutcome, ...]: ...

    async def refine(
        self, setup: TurnSetup, draft: Draft, critiques: Sequence[CritiqueOutcome]
    ) -> str | None: ...

    async def decide(self, setup: TurnSetup, text: str) -> Decision: ...

    async def transmit(self, setup: TurnSetup, request: TransmitRequest) -> TransmitResult: ...

    async def park(
        self, setup: TurnSetup, draft: Draft, critiques: Sequence[CritiqueOutcome], revised: str | None
    ) -> None: ...

    async def finish_run(self, setup: TurnSetup, result: TransmitResult) -> None:
        """Log and close a self-initiated run's conversation, and enqueue its close hooks."""
        ...

    async def deliberate_later(self, setup: TurnSetup, draft: Draft, *, feel: bool = False) -> None:
        """The deferred deliberation, and with `feel` the emotion reading after it (`feel`)."""
        ...

    async def extract_later(self, setup: TurnSetup) -> None: ...

    async def feel_later(self, setup: TurnSetup) -> None: ...

    async def feel(self, setup: TurnSetup) -> None:
        """The emotion reading as a step of the deferred deliberation's workflow."""
        ...


class ExtractionTrigger(Protocol):
    def extraction_due(self, conversation_id: str, new_messages: int) -> bool: ...


class TurnPolicy:
    """The order of a turn (ARCHITECTURE §3 "The order of a turn"), over the SPEC §4 steps."""

    def __init__(
        self, steps: ActivationSteps, jobs: ExtractionTrigger, *, transmit_delay: float = 0.0
    ) -> None:
        self.steps = steps
        self.jobs = jobs
        self.transmit_delay = transmit_delay  # a debugging pause before transmit (crash tests)

    # inside the turn step ---------------------------------------------------------------------
    async def in_turn_step(
        self, received: Received, transmit: Callable[[TransmitRequest], Awaitable[TransmitResult]]
    ) -> Turned:
        """On the common path (`sends_at_once`: no tool calls), inline critique and refinement,
        the decision on the draft when it needs one, and transmit, all inside the turn step;
        every other turn goes on in the workflow (`activate`)."""
        request = self.sends_at_once(received)
        if request is None:
            return Turned(received=received)
        setup = received.setup
        agent_id, event_id = setup.agent_id, setup.event_id
        with rebind(surface=setup.service, channel=setup.channel, conversation_id=setup.conversation_id):
            draft, text = request.draft, request.text
            if (
                draft is not None
                and text is not None
                and setup.mode == "inline"
                and self.critiques(setup, text)
            ):
                request = await self._critiqued(setup, draft)
            if request.text is not None and request.decision is None:
                if self.steps.needs_decision(setup, request.text):
                    decision = await self.steps.decide(agent_id, event_id, setup, request.text)
                else:
                    decision = Decision(action="speak", reason=AUTO_SPEAK)
                request = request.model_copy(update={"decision": decision})
            await self._pause_before_transmit()
            result = await transmit(request)
        return Turned(received=received, result=result)

    def sends_at_once(self, received: Received) -> TransmitRequest | None:
        """The transmit request of a turn whose draft has no tool calls (inline, the turn step
        critiques it first: `_critiqued`), without its decision yet; None for every other turn."""
        draft = received.draft
        if draft is None or draft.reply.tool_calls:  # overheard, a heartbeat; the tool loop
            return None
        text = draft.reply.text
        if text is None:
            return TransmitRequest(draft=draft)
        return TransmitRequest(draft=draft, text=text, decision=received.decision)

    async def _critiqued(self, setup: TurnSetup, draft: Draft) -> TransmitRequest:
        """Inline, inside the turn step: the critics (concurrently, each call keyed on its own
        lens) and, when they object, the refinement. As steps of their own, each would checkpoint
        the whole draft and prompt; the gateway's call checkpoints make a re-run of the one step
        bill nothing twice."""
        agent_id, event_id, text = setup.agent_id, setup.event_id, draft.reply.text
        critiques = await self.steps.critique(agent_id, event_id, setup, draft)
        if any(c.objections for c in critiques):
            text = await self.steps.refine(agent_id, event_id, draft, critiques, live=True) or text
        return TransmitRequest(draft=draft, text=text, critiques=critiques)

    # in the workflow --------------------------------------------------------------------------
    async def activate(self, turn: DurableTurn, turned: Turned) -> TransmitResult:
        """What follows the turn step: its transmit's sequel when it sent, else the rest of the
        turn in steps of its own."""
        received = turned.received
        setup = received.setup
        if turned.result is not None and received.draft is not None:  # sent in the step
            return await self.after_transmit(turn, setup, received.draft, turned.result)
        return await self._activate(turn, setup, received.draft, received.decision)

    async def _activate(
        self, turn: DurableTurn, setup: TurnSetup, draft: Draft | None, decided: Decision | None
    ) -> TransmitResult:
        if setup.kind == "heartbeat":  # assess first: rest, or act on it
            assessment = await turn.assess(setup)
            if assessment.intention == "rest":
                rest = Decision(action="silent", reason=f"resting: {assessment.plan}")
                return await self.finish_run(
                    turn, setup, await turn.transmit(setup, TransmitRequest(decision=rest))
                )
            draft = await turn.respond(setup)
        elif draft is None:  # overheard: decide whether to engage before any draft
            engagement = await turn.engage(setup)
            if engagement.action != "speak":
                return await turn.transmit(setup, TransmitRequest(decision=engagement))
            draft = await turn.respond(setup)
        if draft.reply.tool_calls:
            draft = await turn.tool_loop(setup, draft)
        text = draft.reply.text
        if text is None:
            return await self.finish_run(
                turn, setup, await turn.transmit(setup, TransmitRequest(draft=draft))
            )
        critiques: tuple[CritiqueOutcome, ...] = ()
        final = text
        if self.critiques(setup, text) and setup.mode == "inline":
            critiques = await turn.critique(setup, draft)
            if any(c.objections for c in critiques):
                final = await turn.refine(setup, draft, critiques) or text
        if decided is not None:  # made on the input while the draft was written (deferred)
            decision = decided
        elif self.steps.needs_decision(setup, final):
            decision = await turn.decide(setup, final)
        else:
            decision = Decision(action="speak", reason=AUTO_SPEAK)
        await self._pause_before_transmit()
        request = TransmitRequest(draft=draft, text=final, decision=decision, critiques=critiques)
        return await self.after_transmit(turn, setup, draft, await turn.transmit(setup, request))

    async def after_transmit(
        self, turn: DurableTurn, setup: TurnSetup, draft: Draft, result: TransmitResult
    ) -> TransmitResult:
        """What follows a draft's transmit: the deferred deliberation of what was said, the
        extraction when due, the emotional state after an exchange, and a self-initiated run's end.
        When the deferred deliberation runs, the emotion reading is its last step: one background
        workflow per turn, not two (each costs DBOS an enqueue, a claim and its status writes)."""
        if draft.reply.text is None:  # nothing was generated: nothing to reconsider or read
            return await self.finish_run(turn, setup, result)
        # SPEC §4.9: after an exchange (a message answered), off the reply's path.
        feel = setup.kind == "message" and result.transmitted and self.steps.settings.emotion.enabled
        # Only a draft that was actually said is worth reconsidering (not one replaced by
        # a refusal, nor one kept back).
        deliberating = (
            setup.mode == "deferred"
            and result.action in ("speak", "redirect")
            and self.critiques(setup, draft.reply.text)
        )
        if deliberating:
            await turn.deliberate_later(setup, draft, feel=feel)
        # Every `[conversation] extract_every_messages` messages; the count is a trigger only
        # (in memory), what is read is decided by durable watermarks.
        if self.jobs.extraction_due(setup.conversation_id, 2 if result.transmitted else 1):
            await turn.extract_later(setup)
        if feel and not deliberating:
            await turn.feel_later(setup)
        return await self.finish_run(turn, setup, result)

    async def finish_run(self, turn: DurableTurn, setup: TurnSetup, result: TransmitResult) -> TransmitResult:
        """A self-initiated run (reminder, heartbeat) is one conversation, ended with the run."""
        if setup.kind != "message":
            await turn.finish_run(setup, result)
        return result

    async def deliberate(
        self, turn: DurableTurn, setup: TurnSetup, draft: Draft, *, feel: bool = False
    ) -> None:
        """Deferred critique and refinement of a reply already sent, parked for the next turn;
        then, with `feel`, the exchange's emotion reading (`after_transmit`)."""
        critiques = await turn.critique(setup, draft)
        revised = None
        if any(c.objections for c in critiques):
            revised = await turn.refine(setup, draft, critiques)
        await turn.park(setup, draft, critiques, revised)
        if feel:
            await turn.feel(setup)

    # rules ----------------------------------------------------------------------------------
    def critiques(self, setup: TurnSetup, text: str) -> bool:
        """Whether the draft is critiqued (inline before it is sent, deferred after). A
        heartbeat's words go to no one: nothing to critique before "saying" them."""
        return self.steps.should_critique(text, setup.agent_id) and setup.kind != "heartbeat"

    async def _pause_before_transmit(self) -> None:
        if self.transmit_delay:
            await asyncio.sleep(self.transmit_delay)
