"""Files made in the tests, the shapes real senders send and the shapes attackers send: Pillow's
images, a PNG header claiming a bomb's dimensions, WAVs written by the standard library or by
hand with a header that lies, PDFs by pypdf and by hand."""

from __future__ import annotations

import io
import random
import struct
import wave

from PIL import Image
from pypdf import PdfWriter


def picture(fmt: str, size: tuple[int, int] = (64, 48), *, noisy: bool = False) -> bytes:
    image = Image.new("RGB", size, (200, 30, 30))
    if noisy:  # incompressible, so a cut lands in the middle of the scan data
        rng = random.Random(7)
        image.putdata(
            [(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(size[0] * size[1])]
        )
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def wav_declaring(seconds: float, *, actual_seconds: float = 1.0, rate: int = 16_000) -> bytes:
    """A mono 16-bit WAV whose header declares `seconds` of sound but holds `actual_seconds`."""
    byte_rate = rate * 2
    declared = int(seconds * byte_rate)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, byte_rate, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", min(36 + declared, 0xFFFFFFFF))
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", min(declared, 0xFFFFFFFF))
        + b"\x00\x00" * int(actual_seconds * rate)
    )


def tone_wav(seconds: float, rate: int = 16_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(b"\x10\x00\xf0\xff" * int(seconds * rate / 2))
    return out.getvalue()


def blank_pdf(pages: int, *, password: str | None = None) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    if password is not None:
        writer.encrypt(password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
