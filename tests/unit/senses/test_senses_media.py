"""`inspect_media`: real files made here (Pillow, a hand-built PNG and WAV header, PyAV's and
sox's encoders, pypdf and a hand-written PDF), each checked the way a sender's file is."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from media_samples import blank_pdf, picture, tone_wav, wav_declaring

from persyn.core.config.senses import SensesConfig
from persyn.core.errors import InputError
from persyn.senses.media import MediaInfo, MediaKind, MediaRejected, inspect_media
from persyn.testing.media import bomb_png, text_pdf

Transcode = Callable[[bytes, str], bytes]  # the `transcode` fixture (conftest.py)


def rejected(
    data: bytes, declared: str | None, limits: SensesConfig, filename: str | None = None
) -> MediaRejected:
    with pytest.raises(MediaRejected) as caught:
        inspect_media(data, declared, filename, limits)
    return caught.value


# ---------------------------------------------------------------------------- images


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
def test_an_image_is_measured_from_its_header(fmt: str, media_type: str, limits: SensesConfig) -> None:
    data = picture(fmt, (64, 48))
    assert inspect_media(data, media_type, "photo", limits) == MediaInfo(
        kind=MediaKind.IMAGE, media_type=media_type, size=len(data), width=64, height=48
    )


def test_the_bytes_decide_the_type_within_a_kind(limits: SensesConfig) -> None:
    """A JPEG sent as `image/png` (a renamed file) is a JPEG: what is stored says what it is."""
    info = inspect_media(picture("JPEG"), "image/png", "holiday.png", limits)
    assert (info.kind, info.media_type) == (MediaKind.IMAGE, "image/jpeg")
    assert inspect_media(picture("PNG"), None, None, limits).media_type == "image/png"
    assert inspect_media(picture("PNG"), "application/octet-stream", None, limits).media_type == "image/png"


def test_a_png_declared_as_audio_is_refused(limits: SensesConfig) -> None:
    refusal = rejected(picture("PNG"), "audio/wav", limits)
    assert refusal.reason == "the file was sent as 'audio/wav' but its bytes are a PNG image"
    assert refusal.limit is None
    assert isinstance(refusal, InputError)


def test_text_declared_as_an_image_is_refused(limits: SensesConfig) -> None:
    refusal = rejected(b"<svg onload='alert(1)'></svg>", "image/png", limits)
    assert refusal.reason == "the file was sent as 'image/png' but its bytes are plain text"


def test_an_image_past_the_pixel_limit_is_refused_from_its_header(limits: SensesConfig) -> None:
    data = bomb_png(12_000, 12_000)
    assert len(data) < 200  # nothing to decode: the header alone is refused
    refusal = rejected(data, "image/png", limits)
    assert refusal.reason == "the image is 12000×12000 pixels; the limit is 40 M pixels"
    assert refusal.limit == "image_max_pixels"


def test_a_decompression_bomb_past_pillows_own_limit_is_refused(limits: SensesConfig) -> None:
    """100,000² pixels trips Pillow's bomb error inside `open`: still our refusal, naming our limit."""
    refusal = rejected(bomb_png(100_000, 100_000), "image/png", limits)
    assert refusal.limit == "image_max_pixels"
    assert refusal.reason == "the image declares 10000 M pixels; the limit is 40 M pixels"


def test_the_pixel_limit_is_the_configured_one() -> None:
    small = SensesConfig(image_max_pixels=1000)
    assert inspect_media(picture("PNG", (40, 25)), None, None, small).width == 40
    refusal = rejected(picture("PNG", (40, 26)), None, small)
    assert refusal.reason == "the image is 40×26 pixels; the limit is 1,000 pixels"


def test_an_image_over_its_byte_limit_is_refused_before_it_is_opened() -> None:
    limits = SensesConfig(image_max_bytes=2048)
    data = picture("PNG", (300, 300), noisy=True)
    refusal = rejected(data, "image/png", limits)
    assert refusal.limit == "image_max_bytes"
    assert refusal.reason.startswith("the image is ") and refusal.reason.endswith("; the limit is 2 KB")


def test_a_file_over_every_limit_is_refused_before_it_is_sniffed() -> None:
    limits = SensesConfig(image_max_bytes=4096, audio_max_bytes=8192, document_max_bytes=2048)
    refusal = rejected(b"\x00" * 9000, None, limits)
    assert (refusal.reason, refusal.limit) == (
        "the file is 9 KB; the largest file accepted is 8.2 KB",
        "audio_max_bytes",
    )


def test_a_truncated_jpeg_is_refused_as_corrupt(limits: SensesConfig) -> None:
    whole = picture("JPEG", (256, 256), noisy=True)
    assert inspect_media(whole, "image/jpeg", None, limits).width == 256
    refusal = rejected(whole[: len(whole) // 2], "image/jpeg", limits)
    assert refusal.reason == "the image is corrupt: a JPEG image that cannot be read"
    assert refusal.limit is None


def test_a_png_with_a_broken_checksum_is_refused_as_corrupt(limits: SensesConfig) -> None:
    data = bytearray(picture("PNG", (32, 32), noisy=True))
    data[60] ^= 0xFF  # inside the IDAT chunk
    assert (
        rejected(bytes(data), None, limits).reason == "the image is corrupt: a PNG image that cannot be read"
    )


# ---------------------------------------------------------------------------- audio


def test_a_wav_is_measured_from_its_header(limits: SensesConfig) -> None:
    data = tone_wav(2.5)
    assert inspect_media(data, "audio/x-wav", "note.wav", limits) == MediaInfo(
        kind=MediaKind.AUDIO, media_type="audio/wav", size=len(data), seconds=2.5
    )


def test_a_ten_hour_wav_header_is_refused_before_transcription(limits: SensesConfig) -> None:
    data = wav_declaring(10 * 3600)
    assert len(data) < 40_000  # one second of samples behind a header that claims ten hours
    refusal = rejected(data, "audio/wav", limits)
    assert (refusal.reason, refusal.limit) == (
        "the audio is 10 hours long; the limit is 10 minutes",
        "audio_max_seconds",
    )


def test_a_streamed_wav_without_a_length_is_measured_by_its_samples(limits: SensesConfig) -> None:
    data = bytearray(tone_wav(1.5))
    data[40:44] = b"\xff\xff\xff\xff"  # the data chunk's size, as a streaming writer leaves it
    info = inspect_media(bytes(data), "audio/wav", None, limits)
    assert info.seconds == pytest.approx(1.5, abs=0.05)


@pytest.mark.parametrize(
    "media_type", ["audio/mpeg", "audio/ogg", "audio/opus", "audio/webm", "audio/aac", "audio/mp4"]
)
def test_compressed_audio_is_measured_without_decoding(
    media_type: str, speech_wav: bytes, transcode: Transcode, limits: SensesConfig
) -> None:
    data = transcode(speech_wav, media_type)
    expected = inspect_media(speech_wav, "audio/wav", None, limits).seconds
    info = inspect_media(data, media_type, None, limits)
    assert info.kind is MediaKind.AUDIO
    assert info.media_type == {"audio/opus": "audio/ogg"}.get(media_type, media_type)
    assert expected is not None and info.seconds == pytest.approx(expected, abs=0.15)


def test_a_type_that_claims_no_kind_leaves_it_to_the_bytes(
    speech_wav: bytes, transcode: Transcode, limits: SensesConfig
) -> None:
    """A voice note sent as `video/mp4`, JSON as `application/json`: no kind claimed, none contradicted."""
    assert (
        inspect_media(transcode(speech_wav, "audio/mp4"), "video/mp4", "note.mp4", limits).kind
        is MediaKind.AUDIO
    )
    data = b'{"bicycle": "red"}'
    assert inspect_media(data, "application/json", "a.json", limits) == MediaInfo(
        kind=MediaKind.DOCUMENT, media_type="text/plain", size=len(data)
    )
    assert rejected(data, "audio/mpeg", limits).reason == (
        "the file was sent as 'audio/mpeg' but its bytes are plain text"
    )


def test_compressed_audio_past_the_duration_limit_is_refused(speech_wav: bytes, transcode: Transcode) -> None:
    refusal = rejected(transcode(speech_wav, "audio/mpeg"), "audio/mpeg", SensesConfig(audio_max_seconds=2))
    assert refusal.limit == "audio_max_seconds"
    assert refusal.reason.endswith("; the limit is 2 seconds")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"OggS" + bytes(range(256)) * 4, "the audio is corrupt: Ogg audio that cannot be read"),
        (
            b"RIFF\x00\x01\x00\x00WAVEdata\x10\x00\x00\x00",
            "the audio is corrupt: its WAV data comes before its format",
        ),
        (
            b"RIFF\x00\x01\x00\x00WAVEfmt \x10\x00\x00\x00" + b"\x00" * 16,
            "the audio is corrupt: its WAV header says 0 bytes per second",
        ),
    ],
)
def test_corrupt_audio_is_refused(data: bytes, reason: str, limits: SensesConfig) -> None:
    assert rejected(data, "audio/ogg" if data.startswith(b"OggS") else "audio/wav", limits).reason == reason


# ---------------------------------------------------------------------------- documents


def test_a_pdf_is_counted_in_pages(limits: SensesConfig) -> None:
    data = text_pdf("Hello from a hand written PDF")
    assert inspect_media(data, "application/pdf", "note.pdf", limits) == MediaInfo(
        kind=MediaKind.DOCUMENT, media_type="application/pdf", size=len(data), pages=1
    )


def test_a_500_page_pdf_is_refused(limits: SensesConfig) -> None:
    data = blank_pdf(500)
    assert len(data) < limits.document_max_bytes
    refusal = rejected(data, "application/pdf", limits)
    assert (refusal.reason, refusal.limit) == (
        "the PDF has 500 pages; the limit is 100",
        "document_max_pages",
    )


def test_a_pdf_locked_by_a_password_is_refused(limits: SensesConfig) -> None:
    assert rejected(blank_pdf(1, password="secret"), None, limits).reason == (
        "the PDF is encrypted with a password, so I cannot read it"
    )
    # An empty user password (an owner password alone) opens: it only restricts printing.
    assert inspect_media(blank_pdf(2, password=""), None, None, limits).pages == 2


def test_a_broken_pdf_is_refused(limits: SensesConfig) -> None:
    assert rejected(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", None, limits).reason == (
        "the PDF is corrupt: it cannot be read"
    )


@pytest.mark.parametrize(
    ("data", "declared", "filename", "media_type"),
    [
        (b"just some words\n", "text/plain", None, "text/plain"),
        (b"# A title\n\nSome *words*.", None, "notes.md", "text/markdown"),
        (b"# A title\n\nSome *words*.", "text/markdown; charset=utf-8", None, "text/markdown"),
        (b"<!DOCTYPE html><html><body>hi</body></html>", "text/plain", None, "text/html"),
        ("caf\u00e9 cr\u00e8me".encode("latin-1"), None, None, "text/plain"),
        ("\ufeffhello".encode("utf-16"), None, "a.txt", "text/plain"),
    ],
)
def test_text_is_taken_by_what_it_opens_with_and_what_it_was_called(
    data: bytes, declared: str | None, filename: str | None, media_type: str, limits: SensesConfig
) -> None:
    assert inspect_media(data, declared, filename, limits) == MediaInfo(
        kind=MediaKind.DOCUMENT, media_type=media_type, size=len(data)
    )


@pytest.mark.parametrize(
    "data",
    [b"PK\x03\x04" + b"\x00" * 64, b"\x7fELF\x02\x01\x01" + b"\x00" * 64, bytes(range(256))],
)
def test_a_file_of_no_type_taken_is_refused(data: bytes, limits: SensesConfig) -> None:
    refusal = rejected(data, None, limits)
    assert refusal.limit is None
    assert refusal.reason.startswith("the file is not an image (PNG, JPEG, GIF, WebP), audio")


def test_an_empty_file_is_refused(limits: SensesConfig) -> None:
    assert rejected(b"", "image/png", limits).reason == "the file is empty"
