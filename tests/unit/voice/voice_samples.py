"""Real speech for the voice tests, made here: piper's packaged voice and espeak-ng (a second,
independent voice), as telephone audio (8 kHz μ-law) or as what the ear hears (16 kHz)."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave

import numpy as np
import numpy.typing as npt

import needs
from persyn.voice.audio import LISTEN_RATE, PHONE_RATE, mulaw_decode, mulaw_encode, resample
from persyn.voice.speak import PiperSpeaker


def piper_phone(text: str) -> bytes:
    """`text` said by piper, as 8 kHz μ-law (what a phone line carries)."""
    speech = PiperSpeaker(steady=True).speak_blocking(text)
    return mulaw_encode(resample(speech.samples, speech.rate, PHONE_RATE))


def espeak_phone(text: str) -> bytes:
    """`text` said slowly by espeak-ng, as 8 kHz μ-law."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        needs.missing("espeak-ng")
        raise AssertionError("unreachable")
    done = subprocess.run([espeak, "-s", "130", "--stdout", text], check=True, capture_output=True)
    with wave.open(io.BytesIO(done.stdout), "rb") as reader:
        rate = reader.getframerate()
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
    return mulaw_encode(resample(pcm.astype(np.float32) / 32768.0, rate, PHONE_RATE))


def heard(phone: bytes, *, lead_ms: int = 300, tail_ms: int = 900) -> npt.NDArray[np.float32]:
    """Phone audio as the ear takes it (16 kHz), with silence before and after."""
    samples = resample(mulaw_decode(phone), PHONE_RATE, LISTEN_RATE)
    lead = np.zeros(LISTEN_RATE * lead_ms // 1000, dtype=np.float32)
    tail = np.zeros(LISTEN_RATE * tail_ms // 1000, dtype=np.float32)
    return np.concatenate([lead, samples, tail])


def words(text: str) -> set[str]:
    return {word.strip(".,!?;:'\"").lower() for word in text.split()}
