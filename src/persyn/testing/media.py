"""Media made in a test, as people send it (issue 35): a PDF with text on it, speech
synthesised by espeak-ng, and that speech as a phone's voice note (Ogg Opus, Telegram's and
WhatsApp's form), a small one-colour PNG drawn with Pillow, and a decompression-bomb PNG (a
tiny file whose header declares 90,000×90,000 pixels). Nothing is read from disk or the network: each is made from its words, so a
test can check that the agent read or heard exactly them."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

__all__ = ["bomb_png", "espeak_available", "ogg_opus", "small_png", "spoken_wav", "text_pdf"]


def small_png(size: tuple[int, int] = (48, 32), colour: tuple[int, int, int] = (30, 60, 220)) -> bytes:
    """A `size` PNG of one `colour` (blue by default), drawn with Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def bomb_png(width: int = 90_000, height: int = 90_000) -> bytes:
    """A PNG of a few dozen bytes whose header declares `width`×`height` pixels (a
    decompression bomb): a reader that decodes before checking the header would need gigabytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0"))
        + chunk(b"IEND", b"")
    )


def text_pdf(*lines: str) -> bytes:
    """A one-page PDF with `lines` on it in Helvetica, written by hand (the objects, a content
    stream, the cross-reference table): what pypdf reads back is exactly `lines`."""
    escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
    shown = " ".join(f"({line}) Tj 0 -24 Td" for line in escaped)
    stream = f"BT /F1 18 Tf 72 720 Td {shown} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def spoken_wav(sentence: str) -> bytes:
    """`sentence` spoken by espeak-ng, as a WAV file (22,050 Hz mono)."""
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "spoken.wav"
        subprocess.run(["espeak-ng", "-s", "130", "-w", str(wav), sentence], check=True)
        return wav.read_bytes()


def ogg_opus(wav: bytes) -> bytes:
    """`wav` encoded as a voice note is sent: Opus in an Ogg container, 48 kHz mono (PyAV)."""
    import av  # the `local` extra's decoder; only tests that make a voice note need it

    source = av.open(io.BytesIO(wav), "r")
    out = io.BytesIO()
    with av.open(out, "w", format="ogg") as target:
        stream = target.add_stream("libopus", rate=48_000)
        stream.layout = "mono"
        for frame in source.decode(audio=0):
            frame.pts = None
            for packet in stream.encode(frame):
                target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    source.close()
    return out.getvalue()
