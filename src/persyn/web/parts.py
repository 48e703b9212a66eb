"""Files in web requests (SPEC §4 step 1): the OpenAI content parts of
`/v1/chat/completions` and the native API's `attachments`, as `Upload`s for the runtime to
inspect and keep (`RuntimeAPI.keep_attachments`).

OpenAI parts taken: `image_url` (a `data:` URL, or an http(s) URL the runtime fetches under
`[browse]`'s rules — never a private address), `input_audio` (`{"data": base64, "format":
"wav" | "mp3"}`) and `file` (`{"file_data": base64 or a data: URL, "filename": ...}`; a
`file_id` refers to OpenAI's file store, which is not here: a 400). A part that is not
well-formed is a 400 naming it; whether its bytes are what they claim is the runtime's check.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from persyn.core.events import Upload
from persyn.web.context import ApiError
from persyn.web.models import ContentPart, FilePart

__all__ = ["upload_of_file", "uploads_of"]

_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _b64(value: str, param: str) -> bytes:
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, f"invalid field {param!r}: not base64 data", param=param) from exc


def _data_url(url: str, param: str) -> tuple[bytes, str | None]:
    """(bytes, declared type) of a `data:[type][;base64],...` URL."""
    header, comma, payload = url.partition(",")
    if not comma:
        raise ApiError(400, f"invalid field {param!r}: a data: URL without data", param=param)
    spec = header.removeprefix("data:").split(";")
    declared = spec[0].strip().lower() or None
    if "base64" not in (item.strip().lower() for item in spec[1:]):
        raise ApiError(400, f"invalid field {param!r}: only base64 data: URLs are taken", param=param)
    return _b64(payload, param), declared


def upload_of_file(file: FilePart, param: str) -> Upload:
    if file.file_data is None:
        what = "a file_id (this server keeps no OpenAI file store)" if file.file_id else "no file_data"
        raise ApiError(400, f"invalid field {param!r}: {what}; send file_data, base64", param=param)
    if file.file_data.startswith("data:"):
        data, declared = _data_url(file.file_data, param)
    else:
        data, declared = _b64(file.file_data, param), None
    return Upload(data=data, declared_type=file.media_type or declared, filename=file.filename)


def _upload(part: ContentPart, param: str) -> Upload | None:
    if part.type == "image_url":
        raw = part.image_url.get("url") if isinstance(part.image_url, dict) else part.image_url
        if not isinstance(raw, str) or not raw:
            raise ApiError(400, f"invalid field {param!r}: an image_url part needs a url", param=param)
        if raw.startswith("data:"):
            data, declared = _data_url(raw, param)
            return Upload(data=data, declared_type=declared)
        if raw.startswith(("http://", "https://")):
            return Upload(url=raw)
        raise ApiError(400, f"invalid field {param!r}: a data: or http(s) URL is needed", param=param)
    if part.type == "input_audio":
        audio = part.input_audio or {}
        data, form = audio.get("data"), audio.get("format")
        if not isinstance(data, str) or form not in _AUDIO_TYPES:
            raise ApiError(
                400,
                f"invalid field {param!r}: input_audio needs base64 data and a format, wav or mp3",
                param=param,
            )
        return Upload(data=_b64(data, param), declared_type=_AUDIO_TYPES[str(form)])
    if part.type == "file":
        if part.file is None:
            raise ApiError(400, f"invalid field {param!r}: a file part needs a file", param=param)
        return upload_of_file(part.file, param)
    return None  # text, and parts this API does not take (ignored like unknown parameters)


def uploads_of(parts: Sequence[ContentPart], param: str) -> list[Upload]:
    """The files among a message's content parts, in order."""
    uploads: list[Upload] = []
    for index, part in enumerate(parts):
        upload = _upload(part, f"{param}.{index}")
        if upload is not None:
            uploads.append(upload)
    return uploads
