"""Matrix media in, for the Matrix adapter (`channel.py`): `m.image`, `m.audio`, `m.file` (and
`m.video`, refused) read from a message's content, downloaded from the homeserver's media
repository and kept (`RuntimeAPI.keep_attachments`), or named to the agent when refused.

- The caption: since Matrix v1.10 a media message's `body` is a caption when `filename` is set
  and differs from it; otherwise `body` is the file's name.
- The size is checked before the download where `info.size` says it, and again while the
  bytes arrive: never more than the `[senses]` limit of the file's kind is read, whatever the
  event claimed. The URL is mautrix's (`HTTPAPI.get_download_url`, the authenticated v1.11
  endpoint when the homeserver has it), read on the account's aiohttp session in chunks
  (mautrix's `download_media` reads the whole body, so it cannot stop at a limit).
- An encrypted file (`file` instead of `url`, an end-to-end encrypted room's form) is not
  opened: the agent reads "[an encrypted file I could not open]".
- A video is not taken (no sense watches it): the agent reads that it was refused, and why.
- A file in a room that was not sent to the agent (overheard traffic) is not downloaded: the
  agent reads only that one was shared (`overheard_media`), like a person glancing past it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
from mautrix.client import ClientAPI
from mautrix.errors import MatrixError
from mautrix.types import SpecVersions

from persyn.core.config.senses import SensesConfig
from persyn.core.errors import ChannelError, InputError
from persyn.core.events import Attachment, Upload
from persyn.runtime.api import RuntimeAPI

__all__ = ["ENCRYPTED", "MEDIA_TYPES", "MatrixMedia", "kept_media", "media_of", "overheard_media"]

log = logging.getLogger(__name__)

MEDIA_TYPES = ("m.image", "m.audio", "m.file", "m.video")
ENCRYPTED = "[an encrypted file I could not open]"
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class MatrixMedia:
    """The one file a media message carries, as its event describes it."""

    msgtype: str
    url: str  # mxc://server/id ("" when encrypted)
    encrypted: bool
    filename: str
    media_type: str | None
    size: int | None  # what `info.size` claims: checked first, never trusted
    caption: str


def media_of(content: Mapping[str, Any]) -> MatrixMedia | None:
    """The media of a message's content, or None for text (or a media event without a file)."""
    msgtype = content.get("msgtype")
    if msgtype not in MEDIA_TYPES:
        return None
    raw_body, raw_name, raw_info = content.get("body"), content.get("filename"), content.get("info")
    body = raw_body if isinstance(raw_body, str) else ""
    filename = raw_name if isinstance(raw_name, str) else ""
    caption = body if filename and body != filename else ""
    info: Mapping[str, Any] = cast("Mapping[str, Any]", raw_info) if isinstance(raw_info, dict) else {}
    mimetype = info.get("mimetype")
    size = info.get("size")
    url = content.get("url")
    encrypted = isinstance(content.get("file"), dict)
    if not encrypted and not (isinstance(url, str) and url.startswith("mxc://")):
        return None
    return MatrixMedia(
        msgtype=str(msgtype),
        url=url if isinstance(url, str) and not encrypted else "",
        encrypted=encrypted,
        filename=(filename or body or str(msgtype)[2:]).strip()[:200],
        media_type=mimetype if isinstance(mimetype, str) else None,
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        caption=caption,
    )


def _limit(media: MatrixMedia, senses: SensesConfig) -> tuple[int, str, str]:
    """The most bytes read for this file: its kind's `[senses]` limit (by msgtype, or for
    `m.file` by its declared type), the key's name and what the file is called in the reason."""
    declared = (media.media_type or "").lower()
    if media.msgtype == "m.image" or (media.msgtype == "m.file" and declared.startswith("image/")):
        return senses.image_max_bytes, "image_max_bytes", "image"
    if media.msgtype == "m.audio" or (media.msgtype == "m.file" and declared.startswith("audio/")):
        return senses.audio_max_bytes, "audio_max_bytes", "audio file"
    return senses.document_max_bytes, "document_max_bytes", "document"


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 100_000 else f"{size:,} bytes"


async def _download(client: ClientAPI, media: MatrixMedia, limit: int, refused: str) -> bytes:
    try:
        versions = await client.versions()
        authenticated = bool(versions.supports(SpecVersions.V111))
        url = client.api.get_download_url(media.url, authenticated=authenticated)
        headers = {"Authorization": f"Bearer {client.api.token}"} if authenticated else {}
        async with client.api.session.get(
            url, params={"allow_redirect": "true"}, headers=headers
        ) as response:
            if response.status != 200:
                raise ChannelError(f"matrix media download of {media.url!r}: HTTP {response.status}")
            if response.content_length is not None and response.content_length > limit:
                raise InputError(refused.format(size=_mb(response.content_length)))
            body = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) > limit:  # the event (and the headers) said less: stop reading here
                    raise InputError(refused.format(size=f"over {_mb(limit)}"))
    except (MatrixError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ChannelError(f"matrix media download of {media.url!r}: {type(exc).__name__}: {exc}") from exc
    return bytes(body)


async def kept_media(
    client: ClientAPI,
    api: RuntimeAPI,
    senses: SensesConfig,
    agent_id: str,
    room_id: str,
    sender: str,
    media: MatrixMedia,
    addressed: bool,
) -> tuple[tuple[Attachment, ...], str]:
    """The file downloaded and kept, or the sentence the agent reads instead of it (for a file
    not sent to the agent, without fetching it)."""
    if not addressed:
        return (), overheard_media(media)
    if media.encrypted:
        return (), ENCRYPTED
    if media.msgtype == "m.video":
        return (), f"[a file I refused: {media.filename}: I cannot watch videos]"
    limit, key, what = _limit(media, senses)
    refused = f"the {what} is {{size}}; the limit is {_mb(limit)} ([senses] {key})"
    try:
        if media.size is not None and media.size > limit:
            raise InputError(refused.format(size=_mb(media.size)))
        data = await _download(client, media, limit, refused)
        upload = Upload(data=data, declared_type=media.media_type, filename=media.filename)
        kept = await api.keep_attachments(agent_id, "matrix", room_id, sender, [upload])
    except (InputError, ChannelError) as exc:
        log.warning("matrix: a %s in %s was not kept: %s", media.msgtype, room_id, exc)
        return (), f"[a file I refused: {media.filename}: {exc}]"
    return kept, ""


def overheard_media(media: MatrixMedia) -> str:
    """What the agent reads of a file shared in a room but not sent to it."""
    return f"[a file shared in the room: {media.filename}]"
