"""`persyn doctor` on the senses (issue 35): which engine hears audio, and whether it can; the
`[senses]` limits a sender meets. Audio that cannot be transcribed is not lost (the turn goes on
and says so), so a missing engine is a warning, not a failure."""

from __future__ import annotations

from persyn.core.config import Settings
from persyn.core.errors import ConfigError
from persyn.ops.doctor.postgres import Check
from persyn.senses.hearing import (
    DEFAULT_TRANSCRIBER,
    LOCAL_EXTRA_HINT,
    LocalWhisper,
    build_transcriber,
    local_whisper_available,
)

__all__ = ["senses_checks"]

_NAME = "hearing (transcription)"


def senses_checks(settings: Settings, transcriber: str = DEFAULT_TRANSCRIBER) -> list[Check]:
    """One row for the transcriber the model string `transcriber` names (the local packaged
    model by default): installed, or configured with its key; one row for the limits. A remote
    engine is not probed: a probe would be a transcription, billed."""
    limits = settings.senses
    shown = (
        f"images ≤ {limits.image_max_bytes / 1e6:g} MB and {limits.image_max_pixels / 1e6:g} M pixels, "
        f"audio ≤ {limits.audio_max_bytes / 1e6:g} MB and {limits.audio_max_seconds:g} s, "
        f"documents ≤ {limits.document_max_bytes / 1e6:g} MB and {limits.document_max_pages} pages "
        f"(text kept: {limits.document_max_chars} characters)"
    )
    rows = [Check("senses limits", True, shown)]
    if transcriber.strip().startswith("local:") and not local_whisper_available():
        rows.append(
            Check(
                _NAME,
                False,
                f"{transcriber}: the packaged speech model is not installed, so voice notes are "
                "kept but not heard (the agent says it could not listen)",
                LOCAL_EXTRA_HINT,
                warning=True,
            )
        )
        return rows
    key = settings.secrets.openai_api_key  # read from the environment once, with the settings
    environ = {"OPENAI_API_KEY": key.get_secret_value()} if key is not None else {}
    try:
        engine = build_transcriber(transcriber, language=limits.transcribe_language, environ=environ)
    except ConfigError as exc:
        rows.append(Check(_NAME, False, str(exc), "fix [models] transcribe or [senses] transcribe_language"))
        return rows
    if isinstance(engine, LocalWhisper):
        detail = f"{engine.model}: faster-whisper with the packaged model at {engine.directory}"
    else:
        detail = f"{engine.model}: an OpenAI-compatible /audio/transcriptions endpoint (not probed)"
    rows.append(Check(_NAME, True, detail))
    return rows
