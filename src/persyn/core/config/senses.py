"""`[senses]`: the limits on what people send (images, audio, documents), checked before any
decoding (`persyn.senses.media.inspect_media`), and the transcription language.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field

from persyn.core.section import Section

__all__ = ["SensesConfig"]

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
