"""`[emotion]`: the agent's emotional state (SPEC §4.9).

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from persyn.core.section import Section

__all__ = ["EMOTION_CATEGORIES", "EmotionConfig"]

EMOTION_CATEGORIES: tuple[str, ...] = (
    "engaged",
    "curious",
    "satisfied",
    "amused",
    "calm",
    "frustrated",
    "anxious",
    "sad",
    "bored",
)
"""The documented default categories of the emotional-state classifier (SPEC §4.9)."""


class EmotionConfig(Section):
    """The agent's emotional state (SPEC §4.9): after each exchange a classifier (stage
    `emotion`) gives a probability distribution over `categories`; its top category tags the
    memory records of the conversation, and the recent trajectory is context."""

    enabled: bool = Field(
        default=True,
        description=(
            "Classify the agent's state after each answered message: one call on the `classify` model "
            "(cheap under `auto`), off the reply's path; trivially short exchanges are skipped, and a "
            "burst in one conversation is read once, after its last exchange."
        ),
    )
    min_words: int = Field(
        default=8,
        ge=0,
        le=1000,
        description="An exchange (the message and the reply) of fewer words than this is not classified (0: every one).",
    )
    categories: list[str] = Field(
        default_factory=lambda: list(EMOTION_CATEGORIES),
        min_length=2,
        max_length=32,
        description="The categories of the distribution (lowercase words).",
    )
    trajectory: int = Field(
        default=5, ge=0, le=50, description="How many recent states the prompt shows (0: none)."
    )
    decline_when: list[str] = Field(
        default_factory=lambda: ["frustrated"],
        description="States in which the decision may decline optional requests (shown to the decision).",
    )

    @field_validator("categories")
    @classmethod
    def _words(cls, value: list[str]) -> list[str]:
        for category in value:
            if not category.isalpha() or not category.islower() or len(category) > 32:
                raise ValueError(f"{category!r} is not a lowercase word of at most 32 letters")
        if len(set(value)) != len(value):
            raise ValueError(f"categories repeat: {value!r}")
        return value

    @model_validator(mode="after")
    def _known_decline_states(self) -> EmotionConfig:
        unknown = [state for state in self.decline_when if state not in self.categories]
        if unknown:
            raise ValueError(f"decline_when names {unknown!r}, which are not among the categories")
        return self
