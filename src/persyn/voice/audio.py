"""Telephone audio: G.711 μ-law (what Twilio's Media Streams carry, 8 kHz mono, 20 ms = 160 bytes
a frame) to and from float samples, and resampling between the phone's 8 kHz, what Silero and
Whisper hear (16 kHz) and what piper speaks (22.05 kHz). numpy only: `audioop` leaves Python in
3.13."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "FRAME_BYTES",
    "LISTEN_RATE",
    "PHONE_RATE",
    "mulaw_decode",
    "mulaw_encode",
    "resample",
    "wav_bytes",
]

PHONE_RATE = 8_000
LISTEN_RATE = 16_000
FRAME_BYTES = 160  # 20 ms of 8 kHz μ-law
_BIAS = 0x84
_CLIP = 32_635


def mulaw_encode(samples: npt.NDArray[np.float32]) -> bytes:
    """Float samples in [-1, 1] as G.711 μ-law bytes (ITU-T G.711, the segment/mantissa form)."""
    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int32)
    sign = np.where(pcm < 0, 0x80, 0x00).astype(np.int32)
    magnitude = np.minimum(np.abs(pcm), _CLIP) + _BIAS
    exponent = np.floor(np.log2(magnitude)).astype(np.int32) - 7
    exponent = np.clip(exponent, 0, 7)
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def mulaw_decode(data: bytes) -> npt.NDArray[np.float32]:
    """G.711 μ-law bytes as float samples in [-1, 1]."""
    code = ~np.frombuffer(data, dtype=np.uint8).astype(np.int32) & 0xFF
    sign = code & 0x80
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    magnitude = (((mantissa << 3) + _BIAS) << exponent) - _BIAS
    pcm = np.where(sign != 0, -magnitude, magnitude)
    return (pcm / 32768.0).astype(np.float32)


def resample(samples: npt.NDArray[np.float32], source: int, target: int) -> npt.NDArray[np.float32]:
    """`samples` at `source` Hz as `target` Hz. Upsampling interpolates linearly; downsampling
    first averages over the ratio (a box low-pass), enough for speech on a phone line."""
    if source == target or samples.size == 0:
        return samples.astype(np.float32, copy=False)
    if target < source:
        width = round(source / target)
        if width > 1:
            kernel = np.ones(width, dtype=np.float32) / width
            samples = np.convolve(samples, kernel, mode="same").astype(np.float32)
    count = round(samples.size * target / source)
    positions = np.arange(count, dtype=np.float64) * (source / target)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


def wav_bytes(samples: npt.NDArray[np.float32], rate: int) -> bytes:
    """Mono float samples as a 16-bit PCM WAV file (what a remote transcriber is sent)."""
    import io
    import wave

    pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()
