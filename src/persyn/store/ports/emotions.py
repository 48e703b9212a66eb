"""The emotions sub-port (SPEC §4.9): the agent's emotional state as readings.

A reading is a probability distribution over the configured categories and its top one. One is
written after each exchange (keyed by the event) and one for each memory record consolidated
from a conversation (keyed by the record: the state of the conversation it remembers, whose top
category is the record's `emotion` tag).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EmotionReading", "EmotionsPort", "mean_distribution", "reading_for_record", "top_category"]


class EmotionReading(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    created_at: datetime
    conversation_id: str | None = None
    event_id: str | None = None
    record_id: str | None = None
    distribution: Mapping[str, float] = Field(min_length=1)
    top: str = Field(min_length=1, max_length=32)


class EmotionsPort(ABC):
    @abstractmethod
    async def add_emotion_reading(self, reading: EmotionReading) -> bool:
        """Store a reading; False when one of that id is already stored (a replay)."""

    @abstractmethod
    async def recent_emotions(self, agent_id: str, limit: int) -> list[EmotionReading]:
        """The latest readings after exchanges (not the records'), newest first."""

    @abstractmethod
    async def conversation_emotions(self, agent_id: str, conversation_id: str) -> list[EmotionReading]:
        """The exchange readings of one conversation, oldest first."""

    @abstractmethod
    async def record_emotions(self, agent_id: str, record_ids: Sequence[str]) -> dict[str, EmotionReading]:
        """The readings kept with memory records, by record id."""


def top_category(distribution: Mapping[str, float]) -> str:
    """The strongest category (ties: the first in alphabetical order, so it is stable)."""
    return min(distribution, key=lambda category: (-distribution[category], category))


def mean_distribution(readings: Sequence[EmotionReading]) -> dict[str, float]:
    """The mean of several distributions (a category missing from one counts 0 there)."""
    categories = sorted({c for r in readings for c in r.distribution})
    return {
        c: round(sum(r.distribution.get(c, 0.0) for r in readings) / len(readings), 4) for c in categories
    }


def reading_for_record(
    readings: Sequence[EmotionReading], *, reading_id: str, record_id: str, at: datetime
) -> EmotionReading | None:
    """The reading kept with a memory record: the mean of its conversation's exchange
    readings (None when it had none)."""
    if not readings:
        return None
    distribution = mean_distribution(readings)
    first = readings[0]
    return EmotionReading(
        id=reading_id,
        agent_id=first.agent_id,
        created_at=at,
        conversation_id=first.conversation_id,
        record_id=record_id,
        distribution=distribution,
        top=top_category(distribution),
    )
