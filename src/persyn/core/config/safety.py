"""Guardrails (SPEC §4.10): `[safety]` and `[[guardrails]]`.

A guardrail pairs a detector with actions. Detectors are a model classifier over a window of a
person's messages (which spans conversations), or a deterministic rule over the agent's own
behaviour. The built-in patterns (`builtin_guardrails`) are on unless `[safety] builtin = false`;
a `[[guardrails]]` table with a built-in's name replaces that built-in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from persyn.core.section import Section

__all__ = [
    "CLASSIFIER",
    "RULE_DETECTORS",
    "GuardrailAction",
    "GuardrailConfig",
    "GuardrailDetector",
    "SafetyConfig",
    "builtin_guardrails",
    "effective_guardrails",
]

GuardrailDetector = Literal[
    "classifier", "outbound_messages", "repeated_replies", "tool_failures", "token_spend"
]
GuardrailAction = Literal["notify", "block", "end_conversation"]
CLASSIFIER = "classifier"
RULE_DETECTORS: frozenset[str] = frozenset({"outbound_messages", "repeated_replies", "tool_failures"})
_NAME = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class GuardrailConfig(Section):
    """One guardrail pattern (SPEC §4.10): a detector, a window, a threshold and the actions
    taken when it triggers. `classifier` asks a model (stage `guardrail`) to score one person's
    recent messages, across conversations, against `question` (0 to 1); the rules count the
    agent's own behaviour: `outbound_messages` (messages it sent to one channel),
    `repeated_replies` (the same reply repeated in one channel), `tool_failures` (failed tool
    calls and tripped loop breakers), `token_spend` (tokens the agent's model calls used, every
    stage, from the usage ledger, counted per channel: a channel that spent them is blocked,
    the agent only for the spend of its own autonomous runs)."""

    name: str = Field(
        pattern=_NAME,
        description="A short unique name (lowercase letters, digits, - and _); shown in every event.",
        examples=["escalating-conflict"],
    )
    detector: GuardrailDetector = Field(
        description="`classifier` (a model call over a person's window) or a deterministic rule.",
        examples=["classifier"],
    )
    question: str | None = Field(
        default=None,
        max_length=2000,
        description=(
            "For `classifier`: what the model judges in the person's messages, scored 0 to 1; "
            "`{rules}` is replaced by the agent's rules. Not allowed for a rule."
        ),
        examples=["Is this person's hostility towards me escalating from one conversation to the next?"],
    )
    window_minutes: float = Field(
        default=1440.0, gt=0, le=60 * 24 * 90, description="How far back the detector looks."
    )
    threshold: float = Field(
        default=0.8,
        gt=0,
        description="It triggers at this score (`classifier`: 0 to 1) or count (rules: a whole number ≥ 1).",
    )
    min_conversations: int = Field(
        default=1,
        ge=1,
        le=100,
        description="`classifier` only: judge a person once their window spans at least this many conversations.",
    )
    actions: list[GuardrailAction] = Field(
        default_factory=lambda: ["notify"],
        min_length=1,
        description="What a trigger does: `notify` the operator, `block` replies to the person or channel, `end_conversation`.",
    )
    block_minutes: float = Field(
        default=1440.0, gt=0, le=60 * 24 * 3650, description="How long a `block` lasts (at most ten years)."
    )

    @field_validator("actions")
    @classmethod
    def _distinct_actions(cls, value: list[GuardrailAction]) -> list[GuardrailAction]:
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _fits_detector(self) -> GuardrailConfig:
        if self.detector == CLASSIFIER:
            if not (self.question or "").strip():
                raise ValueError(f"guardrail {self.name!r}: a classifier needs a `question` to judge")
            if self.threshold > 1:
                raise ValueError(
                    f"guardrail {self.name!r}: a classifier's threshold is a score from 0 to 1, "
                    f"not {self.threshold!r}"
                )
        else:
            if self.question is not None:
                raise ValueError(f"guardrail {self.name!r}: the rule {self.detector!r} takes no `question`")
            if self.threshold < 1 or self.threshold != int(self.threshold):
                raise ValueError(
                    f"guardrail {self.name!r}: the rule {self.detector!r} counts, so its threshold is a "
                    f"whole number ≥ 1, not {self.threshold!r}"
                )
        return self


def builtin_guardrails() -> tuple[GuardrailConfig, ...]:
    """The safe defaults: conflict that escalates with one person over several
    conversations, repeated attempts to get what the agent's rules forbid, and three
    anomalies of the agent itself (an outbound or spend spike, a reply loop, failing tools)."""
    return (
        GuardrailConfig(
            name="escalating-conflict",
            detector="classifier",
            question=(
                "Is this person's hostility or conflict with me escalating across these "
                "conversations (insults, threats, growing anger), rather than a single heated moment?"
            ),
            window_minutes=60 * 24 * 7,
            threshold=0.75,
            min_conversations=2,
            actions=["notify", "block"],
            block_minutes=60 * 24,
        ),
        GuardrailConfig(
            name="prohibited-requests",
            detector="classifier",
            question=(
                "Does this person repeatedly try to get me to do or say what my rules forbid, "
                "rephrasing or insisting after refusals? My rules: {rules}"
            ),
            window_minutes=60 * 24,
            threshold=0.8,
            actions=["notify", "block", "end_conversation"],
            block_minutes=60 * 6,
        ),
        GuardrailConfig(
            name="outbound-spike",
            detector="outbound_messages",
            window_minutes=10,
            threshold=40,
            actions=["notify", "block"],
            block_minutes=60,
        ),
        GuardrailConfig(
            name="reply-loop",
            detector="repeated_replies",
            window_minutes=60,
            threshold=4,
            actions=["notify", "block"],
            block_minutes=60,
        ),
        GuardrailConfig(
            name="spend-spike",
            detector="token_spend",
            window_minutes=60,
            threshold=300_000,
            actions=["notify", "block"],
            block_minutes=30,
        ),
        GuardrailConfig(
            name="tool-failures",
            detector="tool_failures",
            window_minutes=60,
            threshold=10,
            actions=["notify"],
        ),
    )


class SafetyConfig(Section):
    """How guardrails run (SPEC §4.10): in the background over recent interaction history,
    with a hard gate on every transmission while a block lasts (`persyn guardrails`)."""

    enabled: bool = Field(default=True, description="Evaluate guardrails and enforce their blocks.")
    builtin: bool = Field(
        default=True,
        description="Include the built-in patterns (a [[guardrails]] table of the same name replaces one).",
    )
    evaluate_seconds: float = Field(
        default=120.0, gt=0, le=86_400, description="How often the scheduler process evaluates the patterns."
    )
    notify_channel: str = Field(
        default="terminal:terminal",
        pattern=r"^[^:\s]+:\S.*$",
        description="Where operator notices go (`service:channel`, through the outbox): the operator's chat by default.",
    )
    daily_tokens: int = Field(
        default=200_000,
        ge=0,
        le=1_000_000_000,
        description="Tokens guardrail classifiers may spend per agent over 24 hours; beyond it only rules run.",
    )
    max_window_messages: int = Field(
        default=60,
        ge=5,
        le=1000,
        description="At most this many of a person's latest messages go to a classifier.",
    )


def effective_guardrails(
    safety: SafetyConfig, configured: list[GuardrailConfig]
) -> tuple[GuardrailConfig, ...]:
    """The patterns in force: the built-ins (unless turned off) with configured ones
    replacing those of the same name, then the other configured ones."""
    by_name = {g.name: g for g in configured}
    patterns = [by_name.pop(g.name, g) for g in builtin_guardrails()] if safety.builtin else []
    return (*patterns, *(g for g in configured if g.name in by_name))
