"""The common event format every channel produces (SPEC §3) and what comes back."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CompletionMarker", "Event", "EventKind", "ImageAttachment", "Notice", "Outbound", "Speaker"]


class EventKind(StrEnum):
    MESSAGE = "message"
    REMINDER = "reminder"
    HEARTBEAT = "heartbeat"


class Speaker(BaseModel):
    """Who sent a message, as the channel knows them. (service, channel, speaker_id) is
    the lookup key of an identity in the contact directory (SPEC §4.4)."""

    model_config = ConfigDict(frozen=True)

    service: str
    channel: str
    speaker_id: str
    display_name: str
    kind: str = "human"


class Event(BaseModel):
    """One stimulus for one agent. Persisted before it is enqueued; its id is the dedup key."""

    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    kind: EventKind = EventKind.MESSAGE
    service: str
    channel: str
    speaker: Speaker | None = None
    text: str
    received_at: datetime
    addressed: bool = True
    meta: dict[str, str] = Field(default_factory=dict[str, str])


class ImageAttachment(BaseModel):
    """An image that goes with an outbound message (ARCHITECTURE §21): the file on this host."""

    model_config = ConfigDict(frozen=True)

    reference: str  # img-<ULID>, what the agent and the text call it
    path: str
    mime: str


class Outbound(BaseModel):
    model_config = ConfigDict(frozen=True)

    event_id: str
    agent_id: str
    service: str
    channel: str
    conversation_id: str
    message_id: str
    text: str
    # Set by the outbox: its row id (the idempotency key a channel deduplicates by), when the
    # row was written, and whether it waited for the channel to connect.
    outbox_id: str | None = None
    sent_at: datetime | None = None
    while_away: bool = False
    # Set by the outbox from the images the text names that are visible on its channel; a
    # channel that cannot show images is given a text line per image instead (`Channel`).
    images: tuple[ImageAttachment, ...] = ()


class Notice(BaseModel):
    """Something the operator should see that is not the agent speaking."""

    model_config = ConfigDict(frozen=True)

    level: str  # "info" | "warning" | "error"
    text: str


class CompletionMarker(BaseModel):
    """Short-lived record of how an event's pipeline run ended (SPEC App. B)."""

    model_config = ConfigDict(frozen=True)

    event_id: str
    transmitted: bool
    text: str | None = None
    reason: str | None = None
    created_at: datetime
    expires_at: datetime
