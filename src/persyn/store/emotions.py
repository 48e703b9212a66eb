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

__all__ = ["EmotionReading", "EmotionsStore"]


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


class EmotionsStore(ABC):
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
