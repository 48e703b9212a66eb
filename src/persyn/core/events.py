"""The common event format every channel produces (SPEC §3) and what comes back."""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from persyn.core.ids import derived_id

__all__ = [
    "ATTACHMENT_REFERENCE",
    "LIVE_BACKGROUND",
    "LIVE_HELD",
    "LIVE_META",
    "Attachment",
    "AttachmentKind",
    "CompletionMarker",
    "Event",
    "EventKind",
    "ImageAttachment",
    "Notice",
    "Outbound",
    "Speaker",
    "Upload",
    "inbound_message_id",
    "speaker_name",
]


# An event's meta on a live call (SPEC Appendix A): `LIVE_META` = `LIVE_BACKGROUND` marks the
# background activation of a turn the fast model already answered. Its transmit holds its words
# for the call (the completion marker's text, reason `LIVE_HELD`) instead of sending them.
LIVE_META = "live"
LIVE_BACKGROUND = "background"
LIVE_HELD = "held for the live call"


class EventKind(StrEnum):
    MESSAGE = "message"
    REMINDER = "reminder"
    HEARTBEAT = "heartbeat"


# What the prompt marks a speaker with: "[name] text" (`cognition/prompt.py`), one speaker per
# line in the transcripts other stages read. A name that holds a bracket or a line break could
# close its own tag and open a fake one: IRC `NICK op]_[Ada` would read "[op]_[Ada] hello".
_LINE_BREAKS = frozenset({"Cc", "Zl", "Zp"})  # controls (\n, \r, NEL...), line and paragraph separators
_BRACKETS = {"[": "(", "]": ")"}


def speaker_name(name: str) -> str:
    """`name` safe to show as a speaker in a prompt: brackets, and the characters that fold
    to one (fullwidth `［`, vertical `﹇`), become parentheses; controls and line breaks
    become spaces; runs of spaces one. Every inbound speaker's name passes here (`Speaker`
    and the names a person chooses) and the prompt cleans what it renders again, for names
    stored before."""
    if name.isascii() and name.isprintable() and "[" not in name and "]" not in name:
        return " ".join(name.split())  # the common case, without a look at each character
    cleaned: list[str] = []
    for char in name:
        if unicodedata.category(char) in _LINE_BREAKS:
            cleaned.append(" ")
            continue
        folded = unicodedata.normalize("NFKC", char) if not char.isascii() else char
        cleaned.append(
            "".join(_BRACKETS.get(c, c) for c in folded) if "[" in folded or "]" in folded else char
        )
    return " ".join("".join(cleaned).split())


class Speaker(BaseModel):
    """Who sent a message, as the channel knows them. (service, channel, speaker_id) is
    the lookup key of an identity in the contact directory (SPEC §4.4).

    Every surface makes one (IRC, Matrix, Telegram, the web, the terminal and console, other
    agents, `persyn send`), so `display_name` is cleaned here, once, of what marks a speaker
    in the prompt (`speaker_name`). `named` is how a channel changes it: `model_copy` would
    skip the cleaning."""

    model_config = ConfigDict(frozen=True)

    service: str
    channel: str
    speaker_id: str
    display_name: str
    kind: str = "human"

    @field_validator("display_name")
    @classmethod
    def _cleaned(cls, value: str) -> str:
        return speaker_name(value)

    def named(self, display_name: str) -> Speaker:
        """This speaker under another name (cleaned like the first)."""
        return Speaker.model_validate({**self.model_dump(), "display_name": display_name})


class AttachmentKind(StrEnum):
    IMAGE = "image"
    AUDIO = "audio"
    DOCUMENT = "document"


# What a kept original is called (`runtime/turn/attachments.py`): att- and a ULID, whose time is
# when it was received.
ATTACHMENT_REFERENCE = re.compile(r"\batt-[0-9A-HJKMNP-TV-Z]{26}\b")


class Attachment(BaseModel):
    """Something a person sent with a message (SPEC §4 step 1): an image, audio or a document,
    kept as the original under `reference` in its conversation's compartment. `media_type` is
    the type sniffed from its bytes (never only what the sender declared); `meta` holds what
    inspecting it found (`width`, `height`, `seconds`, `pages`) as text."""

    model_config = ConfigDict(frozen=True)

    kind: AttachmentKind
    media_type: str
    size: int
    reference: str
    filename: str | None = None
    meta: dict[str, str] = Field(default_factory=dict[str, str])


class Upload(BaseModel):
    """A file as a surface received it, before it is inspected and kept
    (`RuntimeAPI.keep_attachments`): the bytes and what the sender said they are, or an
    http(s) `url` to fetch them from (under `[browse]`'s rules: never a private address)."""

    model_config = ConfigDict(frozen=True)

    data: bytes = b""
    declared_type: str | None = None
    filename: str | None = None
    url: str | None = None


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
    # What came with the text, kept before the event was (`RuntimeAPI.keep_attachments`); the
    # turn reads them as text first (`runtime/turn/senses.py`).
    attachments: tuple[Attachment, ...] = ()


def inbound_message_id(event_id: str, received_at: datetime) -> str:
    """The id of the dialog message an event becomes (`cognition.pipeline`): the same for a
    replay, and computable from the event alone, so a memory's `message_ids` still name the
    event (and its kept originals) once the verbatim dialog is purged."""
    return derived_id(received_at, event_id, "inbound")


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
