"""Real media for the senses' tests, made here: speech by espeak-ng, other containers by PyAV's
own encoders (and sox's Ogg Vorbis), so the decoders under test meet what real senders send."""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import av
import pytest
from av.audio.stream import AudioStream

import needs
from persyn.core.config.senses import SensesConfig

SENTENCE = "the quick brown fox jumps over the lazy dog"

Transcode = Callable[[bytes, str], bytes]


@pytest.fixture
def limits() -> SensesConfig:
    return SensesConfig()


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """About four seconds of a synthesized voice saying `SENTENCE` (espeak-ng, slowly)."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        needs.missing("espeak-ng")
        raise AssertionError("unreachable")
    path = tmp_path_factory.mktemp("speech") / "sentence.wav"
    subprocess.run([espeak, "-s", "130", "-w", str(path), SENTENCE], check=True, capture_output=True)
    return path.read_bytes()


def _pyav_transcode(wav: bytes, container: str, codec: str, rate: int) -> bytes:
    """`wav` re-encoded as `codec` in `container`, by FFmpeg's encoders (PyAV's wheel)."""
    out = io.BytesIO()
    with av.open(io.BytesIO(wav), mode="r") as source, av.open(out, mode="w", format=container) as target:
        stream = target.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, AudioStream)
        resampler = av.AudioResampler(format=stream.format, layout="mono", rate=rate)
        for frame in source.decode(audio=0):
            for converted in resampler.resample(frame):
                for packet in stream.encode(converted):
                    target.mux(packet)
        for converted in resampler.resample(None):
            for packet in stream.encode(converted):
                target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


def _sox_ogg(wav: bytes, directory: Path) -> bytes:
    sox = shutil.which("sox")
    if sox is None:
        needs.missing("sox")
    source, target = directory / "in.wav", directory / "out.ogg"
    source.write_bytes(wav)
    subprocess.run([str(sox), str(source), str(target)], check=True, capture_output=True)
    return target.read_bytes()


@pytest.fixture
def transcode(tmp_path: Path) -> Transcode:
    """`transcode(wav, "audio/mpeg")`: the same sound as MP3, Ogg Vorbis (sox), Ogg Opus, WebM,
    raw AAC (ADTS) or M4A."""

    def run(wav: bytes, media_type: str) -> bytes:
        if media_type == "audio/mpeg":
            return _pyav_transcode(wav, "mp3", "libmp3lame", 22050)
        if media_type == "audio/ogg":
            return _sox_ogg(wav, tmp_path)
        if media_type == "audio/opus":
            return _pyav_transcode(wav, "ogg", "libopus", 48000)
        if media_type == "audio/webm":
            return _pyav_transcode(wav, "webm", "libopus", 48000)
        if media_type == "audio/aac":
            return _pyav_transcode(wav, "adts", "aac", 22050)
        if media_type == "audio/mp4":
            return _pyav_transcode(wav, "ipod", "aac", 22050)  # an .m4a
        raise AssertionError(f"no recipe for {media_type!r}")

    return run
