"""`persyn doctor`'s rows for the senses: the limits a sender meets and the engine that hears."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from persyn.core.config import Secrets, SensesConfig, Settings
from persyn.ops.doctor.senses import senses_checks
from persyn.senses.hearing import local_whisper_available


def _settings(tmp_path: Path, **senses: object) -> Settings:
    return Settings(home=tmp_path, senses=SensesConfig.model_validate(senses))


def test_the_limits_are_shown_as_configured(tmp_path: Path) -> None:
    limits, *_ = senses_checks(_settings(tmp_path, audio_max_seconds=90.0, document_max_pages=12))
    assert (limits.name, limits.ok) == ("senses limits", True)
    assert limits.detail == (
        "images ≤ 20 MB and 40 M pixels, audio ≤ 25 MB and 90 s, documents ≤ 20 MB and 12 pages "
        "(text kept: 20000 characters)"
    )


@pytest.mark.skipif(not local_whisper_available(), reason="needs the 'local' extra (uv sync --extra local)")
def test_the_local_engine_is_reported_installed(tmp_path: Path) -> None:
    _, hearing = senses_checks(_settings(tmp_path))
    assert (hearing.name, hearing.ok, hearing.warning) == ("hearing (transcription)", True, False)
    assert hearing.detail.startswith("local:whisper-tiny.en: faster-whisper with the packaged model at ")


def test_a_language_the_local_model_lacks_is_a_failed_row(tmp_path: Path) -> None:
    if not local_whisper_available():
        pytest.skip("needs the 'local' extra (uv sync --extra local)")
    _, hearing = senses_checks(_settings(tmp_path, transcribe_language="de"))
    assert not hearing.ok and "knows English only, not 'de'" in hearing.detail


def test_a_remote_engine_needs_its_key_from_the_settings(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    _, hearing = senses_checks(settings, "openai:whisper-1")
    assert not hearing.ok and "needs an API key: set OPENAI_API_KEY" in hearing.detail
    keyed = settings.model_copy(update={"secrets": Secrets(openai_api_key=SecretStr("sk-x"))})
    _, hearing = senses_checks(keyed, "openai:whisper-1")
    assert hearing.ok and hearing.detail == (
        "openai:whisper-1: an OpenAI-compatible /audio/transcriptions endpoint (not probed)"
    )
    _, own = senses_checks(settings, "openai:whisper-large-v3@http://127.0.0.1:9000/v1")
    assert own.ok and own.detail.startswith("openai:whisper-large-v3@http://127.0.0.1:9000/v1: ")
