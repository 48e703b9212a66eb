"""Long-term memory records (SPEC §5) and their access designations.

A record is what the agent remembers of an exchange, in its own first-person words. The
relevance score is deliberately absent: it belongs to a (query, record) pair and is computed
at retrieval time (`memory/retrieval.py`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DIRECT_PREFIX",
    "MemoryRecord",
    "RelevanceBand",
    "ScoredRecord",
    "Sensitivity",
    "channel_key",
    "direct_address",
]


class Sensitivity(StrEnum):
    """Access designation of a record; the policy of each level is in `memory/access.py`; the type lives in core because storage and memory both speak it."""

    PUBLIC = "public"
    PRIVATE = "private"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {
    Sensitivity.PUBLIC: 0,
    Sensitivity.PRIVATE: 1,
    Sensitivity.CONFIDENTIAL: 2,
    Sensitivity.RESTRICTED: 3,
}


class RelevanceBand(StrEnum):
    STRONG = "strong"
    MODERATE = "moderate"
    WEAK = "weak"


def channel_key(service: str, channel: str) -> str:
    """The compartment a record belongs to: `service:channel`."""
    return f"{service}:{channel}"


# A channel `@<speaker id>` names a person, not a conversation: a message the agent initiates
# to someone it knows on a network only by their identity. The network's adapter turns it into
# the conversation to write in (`runtime.channel.Channel.direct_channel`: a DM opened, or the
# address itself) before anything is stored, so it never names a compartment.
DIRECT_PREFIX = "@"


def direct_address(speaker_id: str) -> str:
    """The channel that names the person with `speaker_id` on a network (`DIRECT_PREFIX`)."""
    return f"{DIRECT_PREFIX}{speaker_id}"


class MemoryRecord(BaseModel):
    """One autobiographical record. `created_at` is when the remembered exchange happened
    (for imported history, its original time), and is also the time part of `id`."""

    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    created_at: datetime
    channel: str  # channel_key(service, channel)
    participant_ids: tuple[str, ...] = ()
    summary: str
    importance: int = Field(default=5, ge=1, le=10)
    tags: tuple[str, ...] = ()
    emotion: str | None = None
    sensitivity: Sensitivity = Sensitivity.PRIVATE
    conversation_id: str | None = None
    message_ids: tuple[str, ...] = ()
    ref: str | None = None  # opaque external id (imported history); unique per agent
    kind: str = "exchange"  # "exchange" | "conversation" | "reminder" | "reflection" | "goal" | "imported"


class ScoredRecord(BaseModel):
    """A record as surfaced for one query: the score is an annotation, never stored."""

    model_config = ConfigDict(frozen=True)

    record: MemoryRecord
    score: float  # normalised to [0, 1]
    band: RelevanceBand
    tokens: int  # estimated (chars / 4) size of its line in the prompt
    similarity: float | None = None
    keyword: float | None = None
