"""Request bodies of the web API, validated at the edge (a bad field is a 4xx naming it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AddressChange",
    "ChatMessage",
    "ChatRequest",
    "ContentPart",
    "EventRequest",
    "FilePart",
    "IdentityChange",
    "MergeRequest",
    "RenameRequest",
    "StreamOptions",
    "TextPart",
]


# A `user` becomes a contact's display name and the speaker's name in the agent's prompt
# ("[name] text"): no control characters (a newline would start a line of its own) and no
# brackets (they would close the speaker tag and write a fake one).
_USER_NAME = r"^[^\x00-\x1f\x7f\[\]]+$"


class FilePart(BaseModel):
    """A file as OpenAI `file` parts and the native API's `attachments` send it (`web/parts.py`)."""

    model_config = ConfigDict(extra="ignore")

    file_data: str | None = None  # base64, or a data: URL
    filename: str | None = Field(default=None, max_length=500)
    file_id: str | None = None
    media_type: str | None = Field(default=None, max_length=200)


class ContentPart(BaseModel):
    """One part of an OpenAI message's `content` list: text, `image_url`, `input_audio`, `file`."""

    model_config = ConfigDict(extra="ignore")

    type: str
    text: str | None = None
    image_url: dict[str, Any] | str | None = None
    input_audio: dict[str, Any] | None = None
    file: FilePart | None = None


TextPart = ContentPart  # the name it had when only text was read


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(part.text for part in self.content if part.type == "text" and part.text)

    def parts(self) -> list[ContentPart]:
        return self.content if isinstance(self.content, list) else []


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """`POST /v1/chat/completions`. Unknown OpenAI parameters (temperature, ...) are accepted
    and ignored: the agent's own configuration decides how it answers."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, min_length=1, max_length=64, pattern=_USER_NAME)


class EventRequest(BaseModel):
    """`POST /v1/agents/{agent}/events`: one message from the key's client."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    user: str | None = Field(default=None, min_length=1, max_length=64, pattern=_USER_NAME)
    # Files sent with the text (base64 `file_data`, a `filename`, a `media_type`): kept and read
    # as the person's message (SPEC §4 step 1); the text may then be empty.
    attachments: list[FilePart] = Field(default_factory=list[FilePart], max_length=16)


class RenameRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)


class MergeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    survivor: str = Field(min_length=1, max_length=200)
    other: str = Field(min_length=1, max_length=200)
    name: str | None = Field(default=None, min_length=1, max_length=64)


class IdentityChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    service: str = Field(min_length=1, max_length=200)
    channel: str = Field(min_length=1, max_length=500)
    speaker_id: str = Field(min_length=1, max_length=500)
    attach: bool = True


class AddressChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, max_length=100)
    value: str = Field(min_length=1, max_length=500)
    add: bool = True
