"""`[senses]` (and `[voice]`, live voice, with `[voice.twilio]`): the limits on what people send (images, audio, documents), checked before any
decoding (`persyn.senses.media.inspect_media`), and the transcription language.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

import re
from datetime import time
from typing import Literal

from pydantic import Field, field_validator

from persyn.core.section import Section, http_base

__all__ = ["SensesConfig", "TwilioVoiceConfig", "VoiceConfig"]

_MB = 1_000_000


class SensesConfig(Section):
    """What the agent accepts from a sender (SPEC §4 step 1): each limit is checked on the bytes
    and the headers before anything is decoded, and a file over one is refused with a sentence
    naming the limit; the rest of the message is still answered."""

    image_max_bytes: int = Field(
        default=20 * _MB, ge=1024, le=1_000 * _MB, description="An image larger than this is refused."
    )
    image_max_pixels: int = Field(
        default=40_000_000,
        ge=1,
        le=1_000_000_000,
        description="An image whose header declares more pixels (width × height) is refused before decoding.",
    )
    audio_max_bytes: int = Field(
        default=25 * _MB, ge=1024, le=1_000 * _MB, description="An audio file larger than this is refused."
    )
    audio_max_seconds: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="Audio longer than this (read from its container's header) is refused before transcription.",
    )
    document_max_bytes: int = Field(
        default=20 * _MB, ge=1024, le=1_000 * _MB, description="A document larger than this is refused."
    )
    document_max_pages: int = Field(
        default=100, ge=1, le=100_000, description="A PDF with more pages than this is refused."
    )
    document_max_chars: int = Field(
        default=20_000,
        ge=100,
        le=10_000_000,
        description="A document's text is kept up to this many characters (the rest is cut, and marked so).",
    )
    storage_max_bytes: int = Field(
        default=1 << 30,
        ge=0,
        le=1 << 50,
        description="The originals kept for one agent (images, audio, documents) add up to at most this many bytes.",
    )
    original_grace_hours: float = Field(
        default=24.0,
        gt=0,
        le=24 * 365,
        description=(
            "A kept original that no dialog or memory holds is swept once it is this old (an orphan: "
            "its message was refused or never stored; a half-written file left by a crash)."
        ),
    )
    transcribe_language: str = Field(
        default="en",
        pattern=r"[a-z]{2,3}",
        description="The language audio is transcribed in (an ISO 639-1 code; the packaged tiny.en model knows English only).",
    )


class TwilioVoiceConfig(Section):
    """`[voice.twilio]`: the Twilio-compatible telephone transport (Media Streams). The account's
    auth token comes from the environment (`TWILIO_AUTH_TOKEN`), never from the file."""

    account_sid: str = Field(
        default="",
        description="The Twilio account SID (AC…): the REST API's account, and whose auth token signs the webhooks.",
    )
    api_url: str = Field(
        default="https://api.twilio.com",
        min_length=1,
        description="Base URL of the Twilio REST API (outbound calls; a test double's URL in tests).",
    )
    from_number: str = Field(
        default="",
        description="The account's phone number (E.164) outbound calls come from; unset = the agent places no calls.",
        examples=["+15550009999"],
    )
    public_url: str = Field(
        default="",
        description=(
            "The base URL Twilio reaches this server at (https://host): stream URLs are built from it, "
            "and webhook signatures are checked against it."
        ),
        examples=["https://persyn.example.org"],
    )

    @field_validator("api_url", "public_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return http_base(url) if url else url


class VoiceConfig(Section):
    """`[voice]`: live voice (issue 36, SPEC Appendix A) — the agent answers phone calls. Off
    until `enabled`; the speech layer is local by default (Silero VAD, the packaged whisper
    tiny.en, piper)."""

    enabled: bool = Field(
        default=False, description="Answer phone calls (the `[voice.twilio]` transport, on the web server)."
    )
    agent: str | None = Field(
        default=None,
        description="Name of the agent that answers calls; unset = the only (or first) agent.",
        examples=["Ada"],
    )
    allow: list[str] = Field(
        default_factory=list[str],
        description=(
            "Phone numbers (E.164, +1555…) answered besides callers whose number is a known contact's "
            "phone identity."
        ),
        examples=[["+15550001111"]],
    )
    reject: Literal["politely", "ignore"] = Field(
        default="politely",
        description="A caller neither known nor allowed: told politely that the agent takes no calls from them, or not picked up.",
    )
    transcribe: str = Field(
        default="local:whisper-tiny.en",
        min_length=1,
        description="Speech to text on calls: local:whisper-tiny.en, or an OpenAI-compatible openai:NAME@URL.",
    )
    speak: str = Field(
        default="local:piper",
        min_length=1,
        description="Text to speech on calls: local:piper (the packaged en_US voice), or an OpenAI-compatible openai:NAME@URL.",
    )
    speak_voice: str = Field(
        default="alloy", min_length=1, description="The voice a remote `/audio/speech` engine is asked for."
    )
    endpoint_ms: int = Field(
        default=400,
        ge=100,
        le=5000,
        description="Silence after speech that ends the caller's turn (shorter answers sooner, but cuts in on pauses).",
    )
    holding_phrase: str = Field(
        default="Mm, one moment.",
        min_length=1,
        description="What the agent says instead of dead air when it has nothing to say or cannot hear.",
    )
    debounce_ms: int = Field(
        default=300,
        ge=0,
        le=10000,
        description=(
            "Utterances that follow one another closer than this are one turn: a burst of transcript "
            "fragments gets one answer, not one each."
        ),
    )
    prompt_refresh_seconds: float = Field(
        default=120.0,
        gt=0,
        description=(
            "How long a call keeps its cached system prompt (persona, the caller's record, memories) "
            "before building it again."
        ),
    )
    background: bool = Field(
        default=True,
        description=(
            "Run the full pipeline (memory, tools, the strong model) in the background on each turn of a "
            "call; what it finds is woven into the next spoken answer, never spoken directly."
        ),
    )
    max_call_minutes: float = Field(
        default=30.0, gt=0, le=600, description="A call longer than this is ended politely."
    )
    max_calls_per_day: int = Field(
        default=5,
        ge=0,
        le=1000,
        description="Calls the agent may place (place_call) in any 24 hours; 0 = none.",
    )
    quiet_hours: str = Field(
        default="",
        description="When the agent places no calls, HH:MM-HH:MM in the server's local time (may cross midnight); empty = any time.",
        examples=["21:30-08:00"],
    )
    twilio: TwilioVoiceConfig = TwilioVoiceConfig()

    @field_validator("quiet_hours")
    @classmethod
    def _hours(cls, value: str) -> str:
        value = value.strip()
        if value and quiet_span(value) is None:
            raise ValueError(f"quiet_hours {value!r} is not HH:MM-HH:MM (for example 21:30-08:00)")
        return value

    def quiet_at(self, moment: time) -> bool:
        """Whether `moment` (a local time of day) falls in `quiet_hours`."""
        span = quiet_span(self.quiet_hours)
        if span is None:
            return False
        start, end = span
        return start <= moment < end if start <= end else (moment >= start or moment < end)


def quiet_span(text: str) -> tuple[time, time] | None:
    """`HH:MM-HH:MM` as its two times, or None when it is not that."""
    found = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*", text)
    if found is None:
        return None
    h1, m1, h2, m2 = (int(g) for g in found.groups())
    if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
        return None
    return time(h1, m1), time(h2, m2)
