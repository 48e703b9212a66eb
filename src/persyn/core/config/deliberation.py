"""`[deliberation]`: critique, refinement and the decision to speak.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from typing import Literal, cast

from pydantic import Field

from persyn.core.section import Section

__all__ = ["DeliberationConfig", "DeliberationMode", "Lens"]


Lens = Literal["adversarial", "predictive", "constrained", "hopes", "fears"]
DeliberationMode = Literal["inline", "deferred"]


class DeliberationConfig(Section):
    """Counter-perspective critique, refinement and the decision to speak (SPEC §4, §4.2).

    Before it speaks the agent critiques its own substantive drafts: a provenance check
    (claims about the past against what it recalled) plus one lens drawn at random.
    """

    enabled: bool = Field(default=True, description="Critique, refine and decide before speaking.")
    mode: Literal["auto", "inline", "deferred"] = Field(
        default="auto",
        description=(
            '"auto": deferred on interactive channels (the fast draft is sent at once, the critique lands '
            "in the next turn), inline elsewhere (the refined reply is what is sent)."
        ),
    )
    channels: dict[str, DeliberationMode] = Field(
        default_factory=dict[str, DeliberationMode],
        description="The mode per service, over `mode`.",
        examples=[{"terminal": "inline"}],
    )
    lenses: list[Lens] = Field(
        default_factory=lambda: cast(
            list[Lens], ["adversarial", "predictive", "constrained", "hopes", "fears"]
        ),
        min_length=1,
        description="The lenses one is drawn from per substantive draft; provenance always runs too.",
    )
    seed: int | None = Field(
        default=None,
        description="Fixes the lens draw (per event) for reproducible runs; unset = varies by event.",
        examples=[7],
    )
    substantive_min_words: int = Field(
        default=12,
        ge=1,
        description=(
            "A draft is critiqued when it has at least this many words, or speaks about the past, people, "
            "commitments or numbers at any length."
        ),
    )
    decide_ahead: bool = Field(
        default=True,
        description=(
            "Deferred mode: decide whether to speak while the draft is written for every input addressed to "
            "the agent, not only substantive ones, so a plain input whose reply is substantive waits for one "
            "model call, not two; the decision is dropped when the reply comes back short and plain."
        ),
    )
    redundancy_threshold: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description=(
            "A reply whose content words overlap this much with what another speaker just said is "
            "suppressed (1.0 = only exact repeats)."
        ),
    )
    # Each critique would cost seconds of the one local model server the next reply needs.
    offline_model: bool = Field(
        default=False,
        description=(
            "Deliberate even when critique would run on the bundled tiny model (Gemma 3 270M, `local:`), "
            "whose critiques are noise; any other model deliberates."
        ),
    )
    parked_ttl_hours: float = Field(
        default=24.0, gt=0, description="How long a deferred conclusion waits to be woven into the next turn."
    )
