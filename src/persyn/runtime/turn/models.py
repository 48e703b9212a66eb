"""What the activation's durable steps hand each other (SPEC §4): frozen models only.

Each step returns one of these; `runtime.durable.steps.durable_step` dumps it to JSON inside the
step (that JSON is the DBOS checkpoint) and validates it back outside, so the workflow body
reads typed fields and a checkpoint never depends on a Python class. The field names are the
keys the step protocol checkpoints (`STEP_PROTOCOL_VERSION`), so a checkpoint
written by an older build of the same protocol validates here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from persyn.cognition.deliberation import CritiqueOutcome, Decision
from persyn.cognition.pipeline import Prepared, Reply, TurnSetup
from persyn.gateway.base import ToolCall
from persyn.store.base import Conversation
from persyn.tools.breaker import BreakerTrip

__all__ = [
    "ClosedRun",
    "Deferred",
    "Draft",
    "Received",
    "RoundTrip",
    "ToolUse",
    "TransmitRequest",
    "TransmitResult",
    "Turned",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ToolUse(_Frozen):
    """A tool the turn used and how the call ended, for the deliberation trace."""

    name: str
    status: str


# The decision recorded when no model was needed.
AUTO_SPEAK = "a plain answer to someone talking to me"


class Draft(_Frozen):
    """The candidate reply with the prompt it came from. `budget` is why nothing was
    generated (the channel's reply budget is used); `tools` and `trips` are what the tool
    loop did on the way to `reply` (SPEC §4.6)."""

    reply: Reply
    prepared: Prepared | None
    budget: str | None = None
    tools: tuple[ToolUse, ...] = ()
    trips: tuple[BreakerTrip, ...] = ()

    @property
    def text(self) -> str:
        return self.reply.text or ""


class Received(_Frozen):
    """The receive step: the turn's setup and, when the message was for the agent, the draft
    (None: overheard traffic or a heartbeat, which decide before drafting). `decision` is the
    decision made on the input while the draft was written (deferred deliberation), None when
    the turn decides on its draft or needs no model to decide."""

    setup: TurnSetup
    draft: Draft | None = None
    decision: Decision | None = None


class RoundTrip(_Frozen):
    """One more model round-trip of the tool loop; `failure` ends the loop with what was
    said so far."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    failure: str | None = None
    usage_id: str | None = None


class TransmitRequest(_Frozen):
    """What transmit acts on: the draft (if any), the final text, the decision and what the
    critics said (SPEC §4 step 7)."""

    draft: Draft | None = None
    text: str | None = None
    decision: Decision | None = None
    critiques: tuple[CritiqueOutcome, ...] = ()


class TransmitResult(_Frozen):
    """How the activation ended: said (where, as which message) or not, and why."""

    transmitted: bool
    action: str | None = None
    text: str | None = None
    message_id: str | None = None
    reason: str | None = None


class Turned(_Frozen):
    """The turn step: what was received (the setup, the draft, a decision made on the input)
    and, on the common path (a draft with no tool calls and nothing to critique before
    sending), how its transmit ended. `result` None: the workflow goes on with the tool
    loop, critique, an engagement decision or a self-assessment, each a step of its own."""

    received: Received
    result: TransmitResult | None = None


class ClosedRun(_Frozen):
    """The conversation a self-initiated run closed (its close hooks are enqueued next)."""

    conversation: Conversation


class Deferred(_Frozen):
    """The deferred deliberation's input: the turn and the draft that was already sent.
    `trace_parent` joins the deliberation's spans to the turn's trace (a W3C traceparent;
    None when tracing is off). `feel`: the exchange's emotion reading follows the deliberation
    in its workflow (one background workflow per turn, not two: `TurnPolicy.after_transmit`);
    a deliberation enqueued without it (by an older build) leaves the reading to its own."""

    setup: TurnSetup
    draft: Draft
    trace_parent: str | None = None
    feel: bool = False
