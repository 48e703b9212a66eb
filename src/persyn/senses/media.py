"""What a sent file is, checked before anything decodes it (SPEC §4 step 1; issue 35 item 4).

`inspect_media` is the one gate every image, audio file and document passes before it is stored,
captioned, transcribed or read. In order:

1. the byte size against the largest limit of any kind (nothing bigger is even sniffed), then
   against its own kind's limit once the kind is known;
2. the kind and media type **sniffed from the bytes** (magic numbers), never taken from the
   sender: a declared type of another kind than the bytes (a PNG sent as `audio/wav`) is refused.
   Within one kind the sniffed type wins (a JPEG named `.png` is a JPEG): what is stored and
   served back is always the type the bytes are;
3. the kind's own header: an image's dimensions from its header before any pixel is decoded
   (Pillow's lazy `Image.open`), then a verify of its structure; audio's duration from its
   container's header (a WAV's chunk sizes; PyAV's demuxer, packets summed without decoding when
   the header has no duration); a PDF's page count (pypdf, after the byte cap); text must be text.

Each refusal is a `MediaRejected` whose `reason` is a sentence for the sender naming the limit,
and whose `limit` is the `[senses]` key that refused it (None for a file that is corrupt or of
a type not taken at all).
"""

from __future__ import annotations

import io
import re
import struct
import warnings
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from persyn.core.config.senses import SensesConfig
from persyn.core.errors import InputError

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = [
    "AUDIO_TYPES",
    "DOCUMENT_TYPES",
    "IMAGE_TYPES",
    "MediaInfo",
    "MediaKind",
    "MediaRejected",
    "audio_seconds",
    "inspect_media",
    "open_pdf",
    "pdf_page_count",
    "sniff_media_type",
]


class MediaKind(StrEnum):
    IMAGE = "image"
    AUDIO = "audio"
    DOCUMENT = "document"


IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
AUDIO_TYPES = frozenset(
    {"audio/wav", "audio/mpeg", "audio/aac", "audio/ogg", "audio/flac", "audio/mp4", "audio/webm"}
)
DOCUMENT_TYPES = frozenset({"application/pdf", "text/plain", "text/markdown", "text/html"})
_TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/html"})

# The names senders use for the types above (RFC 2046 leaves much to taste).
_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/mp3": "audio/mpeg",
    "audio/mpeg3": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/opus": "audio/ogg",
    "audio/x-flac": "audio/flac",
    "audio/x-m4a": "audio/mp4",
    "audio/m4a": "audio/mp4",
    "audio/x-aac": "audio/aac",
    "audio/aacp": "audio/aac",
    "video/webm": "audio/webm",
    "video/ogg": "audio/ogg",
    "application/ogg": "audio/ogg",
    "text/x-markdown": "text/markdown",
    "application/xhtml+xml": "text/html",
}
_TEXT_SUFFIXES = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
}
# PyAV's demuxer for each audio type: naming it spares libavformat's probing of the bytes.
_DEMUXERS = {
    "audio/mpeg": "mp3",
    "audio/aac": "aac",
    "audio/ogg": "ogg",
    "audio/flac": "flac",
    "audio/mp4": "mp4",
    "audio/webm": "matroska",
    "audio/wav": "wav",
}
_PILLOW_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WEBP"}
_TEXT_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class MediaInfo:
    """A file that passed `inspect_media`: its kind, the type its bytes are, and what its header
    says (the fields of other kinds are None)."""

    kind: MediaKind
    media_type: str  # sniffed from the bytes, never the sender's word
    size: int
    width: int | None = None
    height: int | None = None
    seconds: float | None = None
    pages: int | None = None


class MediaRejected(InputError):
    """A sent file refused before it was decoded or stored.

    `reason` is one sentence for the sender ("the image is 12000×12000 pixels; the limit is 40 M
    pixels"); `limit` is the `[senses]` key that refused it, or None when the file is corrupt or
    not a type the agent takes."""

    def __init__(self, reason: str, limit: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.limit = limit


def inspect_media(
    data: bytes, declared_type: str | None, filename: str | None, limits: SensesConfig
) -> MediaInfo:
    """The checks of the module docstring, cheapest first; a `MediaRejected` at the first that
    fails. Nothing here decodes more than a header (and, for images, a verify pass). Blocking
    (an image's verify pass takes up to seconds, see `_verify_image`): call it in a thread from
    async code."""
    largest = max(limits.image_max_bytes, limits.audio_max_bytes, limits.document_max_bytes)
    if len(data) > largest:
        raise MediaRejected(
            f"the file is {_bytes(len(data))}; the largest file accepted is {_bytes(largest)}",
            _largest_key(limits),
        )
    if not data:
        raise MediaRejected("the file is empty")
    declared = _normalise(declared_type)
    media_type = sniff_media_type(data, declared, filename)
    kind = _kind(media_type)
    claimed = _declared_kind(declared) if declared is not None else None
    if claimed is not None and claimed != kind:
        raise MediaRejected(f"the file was sent as {declared!r} but its bytes are {_describe(media_type)}")
    if kind is MediaKind.IMAGE:
        _check_size(data, limits.image_max_bytes, "image", "image_max_bytes")
        return _inspect_image(data, media_type, limits)
    if kind is MediaKind.AUDIO:
        _check_size(data, limits.audio_max_bytes, "audio file", "audio_max_bytes")
        seconds = audio_seconds(data, media_type)
        if seconds > limits.audio_max_seconds:
            raise MediaRejected(
                f"the audio is {_duration(seconds)} long; the limit is {_duration(limits.audio_max_seconds)}",
                "audio_max_seconds",
            )
        return MediaInfo(kind=kind, media_type=media_type, size=len(data), seconds=seconds)
    _check_size(data, limits.document_max_bytes, "document", "document_max_bytes")
    if media_type == "application/pdf":
        pages = pdf_page_count(data)
        if pages > limits.document_max_pages:
            raise MediaRejected(
                f"the PDF has {pages} pages; the limit is {limits.document_max_pages}", "document_max_pages"
            )
        return MediaInfo(kind=kind, media_type=media_type, size=len(data), pages=pages)
    return MediaInfo(kind=kind, media_type=media_type, size=len(data))


def sniff_media_type(data: bytes, declared: str | None = None, filename: str | None = None) -> str:
    """The type the bytes are, by their magic numbers. Text has none: bytes without a binary
    signature that decode as text are HTML when they open like HTML, else the text type the
    sender declared or the file name says (Markdown or plain), else plain text. Anything else is
    a `MediaRejected` naming what it might be."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith((b"RIFF", b"RIFX", b"RF64")) and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "audio/webm"
    if head[4:8] == b"ftyp":
        return "audio/mp4"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        pass  # a UTF-16 byte-order mark, which MP3's frame sync below would also match: text
    elif len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "audio/aac"  # an ADTS frame: MPEG's sync word with layer 0, which MP3 never has
    elif head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    if data[:1024].lstrip().startswith(b"%PDF-"):
        return "application/pdf"
    if _looks_like_text(data[:_TEXT_SNIFF_BYTES]):
        opening = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
        if opening.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
            return "text/html"
        for guess in (declared, _suffix_type(filename)):
            if guess in _TEXT_TYPES:
                return guess
        return "text/plain"
    raise MediaRejected(
        "the file is not an image (PNG, JPEG, GIF, WebP), audio (WAV, MP3, AAC, Ogg, FLAC, M4A, WebM) "
        "or a document (PDF, text, Markdown, HTML) I can take"
    )


def audio_seconds(data: bytes, media_type: str) -> float:
    """How long the audio is, from its container's header: a WAV's own chunk sizes, any other
    container through PyAV's demuxer (its duration, or the packets' durations summed without
    decoding one when the header gives none, as a browser's WebM recording does)."""
    if media_type == "audio/wav":
        seconds = _wav_seconds(data)
        if seconds is not None:
            return seconds
    return _demuxed_seconds(data, media_type)


def pdf_page_count(data: bytes) -> int:
    """The number of pages of a PDF (its page tree, nothing rendered); an encrypted PDF that
    opens without a password counts, any other is refused."""
    return len(open_pdf(data).pages)


def open_pdf(data: bytes) -> PdfReader:
    """A pypdf reader over `data`, decrypted when it opens without a password (an owner password
    alone only restricts printing and copying); a broken or locked PDF is refused."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise MediaRejected("the PDF is encrypted with a password, so I cannot read it")
        # The page tree is read here, so a broken one is refused at the gate, not later.
        len(reader.pages)
    except MediaRejected:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError, RecursionError) as exc:
        raise MediaRejected("the PDF is corrupt: it cannot be read") from exc
    except NotImplementedError as exc:  # an encryption scheme pypdf cannot open without extras
        raise MediaRejected("the PDF is encrypted in a way I cannot read") from exc
    return reader


# ---------------------------------------------------------------------------- images


def _inspect_image(data: bytes, media_type: str, limits: SensesConfig) -> MediaInfo:
    from PIL import Image, UnidentifiedImageError

    formats = [_PILLOW_FORMATS[media_type]]
    try:
        # Pillow's own bomb check (a warning past `Image.MAX_IMAGE_PIXELS`, an error past twice
        # that) runs inside `open`; ours below names the configured limit, so the warning is
        # noise here and the error a refusal like ours.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=formats) as image:
                width, height = image.size  # from the header: nothing decoded yet
    except Image.DecompressionBombError as exc:
        # Its message is the one place the declared size is left: "Image size (N pixels) ...".
        declared = re.search(r"\((\d+) pixels\)", str(exc))
        amount = _pixels(int(declared[1])) if declared else "more"
        raise MediaRejected(
            f"the image declares {amount} pixels; the limit is {_pixels(limits.image_max_pixels)} pixels",
            "image_max_pixels",
        ) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise MediaRejected(f"the image is corrupt: {_describe(media_type)} that cannot be read") from exc
    if width < 1 or height < 1:
        raise MediaRejected(f"the image is corrupt: its header says {width}×{height} pixels")
    if width * height > limits.image_max_pixels:
        raise MediaRejected(
            f"the image is {width}×{height} pixels; the limit is {_pixels(limits.image_max_pixels)} pixels",
            "image_max_pixels",
        )
    _verify_image(data, formats, media_type)
    return MediaInfo(kind=MediaKind.IMAGE, media_type=media_type, size=len(data), width=width, height=height)


def _verify_image(data: bytes, formats: list[str], media_type: str) -> None:
    """A structural check once the size is known to be bounded: PNG's chunk checksums (its
    `verify`); JPEG, GIF and WebP, whose `verify` checks little, are decoded (a JPEG at an
    eighth of its size through libjpeg's DCT scaling, which still reads every byte of it), so a
    truncated or garbled file is refused here rather than by whoever reads it next. Worst case
    (12 MP of noise, 2 cores at load 15): JPEG 10.8 MB 0.27 s, PNG 36 MB 0.04 s, WebP 10 MB 2.6 s
    (libwebp has no scaled decoding); a photo compresses better and decodes faster."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=formats) as image:
                if media_type == "image/png":
                    image.verify()
                else:
                    width, height = image.size
                    image.draft("RGB", (max(1, width // 8), max(1, height // 8)))
                    image.load()
    except Exception as exc:  # Pillow raises many types for a broken file; any means "corrupt"
        raise MediaRejected(f"the image is corrupt: {_describe(media_type)} that cannot be read") from exc


# ---------------------------------------------------------------------------- audio


def _wav_seconds(data: bytes) -> float | None:
    """The duration a RIFF WAV's header declares: the `data` chunk's size over the `fmt ` chunk's
    byte rate. None when the header leaves it open (a streamed WAV writes 0 or 0xFFFFFFFF there,
    an RF64 puts it elsewhere): PyAV then measures it."""
    if not data.startswith(b"RIFF") or data[8:12] != b"WAVE":
        return None
    position = 12
    byte_rate: int | None = None
    while position + 8 <= len(data):
        chunk_id = data[position : position + 4]
        (chunk_size,) = struct.unpack_from("<I", data, position + 4)
        body = position + 8
        if chunk_id == b"fmt ":
            if chunk_size < 16 or body + 16 > len(data):
                raise MediaRejected("the audio is corrupt: its WAV format header is cut short")
            (byte_rate,) = struct.unpack_from("<I", data, body + 8)
            if byte_rate == 0:
                raise MediaRejected("the audio is corrupt: its WAV header says 0 bytes per second")
        elif chunk_id == b"data":
            if byte_rate is None:
                raise MediaRejected("the audio is corrupt: its WAV data comes before its format")
            if chunk_size in (0, 0xFFFFFFFF):
                return None
            return chunk_size / byte_rate
        position = body + chunk_size + (chunk_size & 1)
    raise MediaRejected("the audio is corrupt: its WAV header has no data chunk")


def _demuxed_seconds(data: bytes, media_type: str) -> float:
    import av

    try:
        with av.open(io.BytesIO(data), mode="r", format=_DEMUXERS.get(media_type)) as container:
            streams = container.streams.audio
            if not streams:
                raise MediaRejected(f"the file has no audio in it ({_describe(media_type)})")
            stream = streams[0]
            # Raw AAC (ADTS) has no header: FFmpeg's duration is a guess from the bitrate (10 %
            # off on a VBR voice note), so its packets are counted instead.
            measured = media_type != "audio/aac"
            if measured and stream.duration and stream.time_base is not None and stream.duration > 0:
                return float(stream.duration * stream.time_base)
            if measured and container.duration is not None and container.duration > 0:
                return container.duration / av.time_base
            total = 0.0
            for packet in container.demux(stream):  # packets only: nothing is decoded
                if packet.duration is not None:
                    total += float(packet.duration * packet.time_base)
            if total <= 0:
                raise MediaRejected(f"the audio is corrupt: {_describe(media_type)} with no sound in it")
            return total
    except MediaRejected:
        raise
    except Exception as exc:  # PyAV's FFmpegError tree and the odd ValueError: any means "corrupt"
        raise MediaRejected(f"the audio is corrupt: {_describe(media_type)} that cannot be read") from exc


# ---------------------------------------------------------------------------- types and words


def _normalise(declared: str | None) -> str | None:
    if declared is None:
        return None
    bare = declared.split(";", 1)[0].strip().lower()
    if not bare:
        return None
    return _ALIASES.get(bare, bare)


def _suffix_type(filename: str | None) -> str | None:
    if not filename or "." not in filename:
        return None
    return _TEXT_SUFFIXES.get("." + filename.rsplit(".", 1)[1].lower())


def _kind(media_type: str) -> MediaKind:
    if media_type in IMAGE_TYPES:
        return MediaKind.IMAGE
    if media_type in AUDIO_TYPES:
        return MediaKind.AUDIO
    return MediaKind.DOCUMENT


def _declared_kind(declared: str) -> MediaKind | None:
    """The kind a declared type claims: any `image/…` is an image and any `audio/…` audio (even
    one not taken), a PDF or `text/…` a document. Other types (`application/octet-stream`,
    `application/json`, `video/mp4` for a voice note with a picture) claim no kind: the bytes
    decide alone."""
    major = declared.split("/", 1)[0]
    if major == "image":
        return MediaKind.IMAGE
    if major == "audio":
        return MediaKind.AUDIO
    if declared == "application/pdf" or major == "text":
        return MediaKind.DOCUMENT
    return None


def _looks_like_text(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 with its byte-order mark
        return True
    if b"\x00" in head:
        return False
    controls = sum(1 for byte in head if byte < 0x20 and byte not in b"\t\n\r\f\x1b")
    return controls <= len(head) // 100


def _check_size(data: bytes, limit: int, what: str, key: str) -> None:
    if len(data) > limit:
        raise MediaRejected(f"the {what} is {_bytes(len(data))}; the limit is {_bytes(limit)}", key)


def _largest_key(limits: SensesConfig) -> str:
    sizes = {
        "image_max_bytes": limits.image_max_bytes,
        "audio_max_bytes": limits.audio_max_bytes,
        "document_max_bytes": limits.document_max_bytes,
    }
    return max(sizes, key=sizes.__getitem__)


_DESCRIPTIONS = {
    "image/png": "a PNG image",
    "image/jpeg": "a JPEG image",
    "image/gif": "a GIF image",
    "image/webp": "a WebP image",
    "audio/wav": "WAV audio",
    "audio/mpeg": "MP3 audio",
    "audio/aac": "AAC audio",
    "audio/ogg": "Ogg audio",
    "audio/flac": "FLAC audio",
    "audio/mp4": "MP4/M4A audio",
    "audio/webm": "WebM audio",
    "application/pdf": "a PDF",
    "text/plain": "plain text",
    "text/markdown": "Markdown text",
    "text/html": "an HTML page",
}


def _describe(media_type: str) -> str:
    return _DESCRIPTIONS.get(media_type, media_type)


def _bytes(size: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}".replace(".0 ", " ")
        size /= 1000
    raise AssertionError("unreachable")


def _pixels(count: int) -> str:
    return f"{count / 1e6:g} M" if count >= 1_000_000 else f"{count:,}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} seconds" if seconds >= 1 else f"{seconds:.1f} seconds"
    minutes = seconds / 60
    if minutes < 120:
        return f"{minutes:.0f} minutes"
    return f"{minutes / 60:.1f} hours".replace(".0 ", " ")
