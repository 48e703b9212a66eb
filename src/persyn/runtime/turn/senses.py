"""What people send, kept and made text (SPEC §4 step 1).

**Kept.** `Senses.keep` inspects every file of a message against `[senses]` before anything is
decoded or written (`persyn.senses.media.inspect_media`), then checks the agent's storage cap
(`storage_max_bytes`) for all of them together, and only then writes them: a message is kept
whole or not at all. Each original is a file under `<data>/attachments/<agent>/` with its
metadata beside it (`<ref>.json`), scoped like the images the agent makes
(`tools/images/generate.py`): the channel key of the conversation it was sent in, with the
channel, the sender and the agent. `AttachmentLibrary.get` answers only for a scope among the
caller's eligible channels (`memory.access.eligible_channels`): from anywhere else a reference
is answered exactly like one that does not exist.

**Made text.** `Senses.perceive` runs once, before the event is stored and enqueued, so every
step of the turn and a replay of it read the same words and pay for them once: an image is
captioned by the `caption` task's model (when its profile can see), audio transcribed by the
`[models] transcribe` engine (metered as seconds of audio), a document read to bounded text.
The words stand where the person's message does — `[photo: a red bicycle] is this mine?` — so
memory, critique, decide and consolidation read them like anything said. Failures fail soft:
the turn goes on with "[an image I could not look at: reason]". A message without attachments
never reaches this module.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from persyn.core.config import Settings, Task
from persyn.core.errors import InputError, ModelError, PersynError, ToolError
from persyn.core.events import Attachment, AttachmentKind, Event, Upload
from persyn.core.ids import new_id
from persyn.core.records import channel_key
from persyn.gateway.base import ImageInput, Prompt, UserTurn
from persyn.gateway.gateway import TRANSCRIBE_STAGE, ModelGateway
from persyn.senses.documents import read_document
from persyn.senses.hearing import Transcriber, build_transcriber
from persyn.senses.library import GONE_ORIGINAL, AttachmentLibrary, KeptOriginal
from persyn.senses.media import MediaInfo, MediaRejected, inspect_media
from persyn.tools.world.web import WebFetcher
from persyn.usage import context as usage_context

__all__ = ["CAPTION_STAGE", "TRANSCRIBE_STAGE", "AttachmentLibrary", "KeptOriginal", "Senses"]

log = logging.getLogger(__name__)

CAPTION_STAGE = "caption"
_CAPTION_SYSTEM = (
    "You describe an image for someone who cannot see it. In one or two plain sentences say what "
    "it shows: the main subject, its colours, any words in it. No preamble."
)
_EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "audio/wav": "wav",
    "audio/mpeg": "mp3",
    "audio/ogg": "ogg",
    "audio/flac": "flac",
    "audio/mp4": "m4a",
    "audio/webm": "webm",
    "application/pdf": "pdf",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/html": "html",
}


def _meta(info: MediaInfo) -> dict[str, str]:
    found = {"width": info.width, "height": info.height, "pages": info.pages}
    meta = {key: str(value) for key, value in found.items() if value is not None}
    if info.seconds is not None:
        meta["seconds"] = f"{info.seconds:.1f}"
    return meta


class Senses:
    """Keeps what people send and reads it as text, for every agent of a runtime."""

    def __init__(self, settings: Settings, gateways: Mapping[str, ModelGateway]) -> None:
        self.settings = settings
        self.limits = settings.senses
        self.library = AttachmentLibrary(settings.data_dir / "attachments")
        self._gateways = gateways
        self._transcriber: Transcriber | None = None

    # keeping ------------------------------------------------------------------------------
    def keep(
        self,
        agent_id: str,
        service: str,
        channel: str,
        speaker_id: str | None,
        uploads: Sequence[Upload],
        now: datetime,
    ) -> tuple[Attachment, ...]:
        """Inspect every upload, check the storage cap for all of them, then keep them; a
        `MediaRejected` (an `InputError` naming the limit) before anything is written."""
        inspected = [
            (upload, inspect_media(upload.data, upload.declared_type, upload.filename, self.limits))
            for upload in uploads
        ]
        adding = sum(info.size for _, info in inspected)
        used = self.library.used_bytes(agent_id)
        cap = self.limits.storage_max_bytes
        if used + adding > cap:
            raise MediaRejected(
                f"keeping this would take the files I keep to {used + adding} bytes; the limit is {cap} bytes",
                "storage_max_bytes",
            )
        kept: list[Attachment] = []
        for upload, info in inspected:
            reference = f"att-{new_id(now)}"
            original = KeptOriginal(
                reference=reference,
                agent_id=agent_id,
                scope=channel_key(service, channel),
                service=service,
                channel=channel,
                speaker_id=speaker_id,
                kind=AttachmentKind(info.kind.value),
                media_type=info.media_type,
                size=info.size,
                sha256=hashlib.sha256(upload.data).hexdigest(),
                filename=_safe_filename(upload.filename),
                file=f"{reference}.{_EXTENSIONS.get(info.media_type, 'bin')}",
                received_at=now,
                meta=_meta(info),
            )
            self.library.put(original, upload.data)
            kept.append(original.attachment())
        return tuple(kept)

    async def fetched(self, uploads: Sequence[Upload]) -> list[Upload]:
        """`uploads` with every `url` fetched through the web tools' guarded reader (no loopback,
        no private ranges, redirects checked again, at most `image_max_bytes`)."""
        if all(upload.url is None for upload in uploads):
            return list(uploads)
        browse = self.settings.browse.model_copy(update={"max_bytes": self.limits.image_max_bytes})
        fetcher = WebFetcher(browse)
        fetched: list[Upload] = []
        for upload in uploads:
            if upload.url is None:
                fetched.append(upload)
                continue
            try:
                page = await fetcher.fetch(upload.url)
            except ToolError as exc:
                raise MediaRejected(f"the image at {upload.url!r} could not be fetched: {exc}") from exc
            name = upload.filename or page.url.rsplit("/", 1)[-1].split("?", 1)[0] or None
            fetched.append(Upload(data=page.body, declared_type=page.content_type or None, filename=name))
        return fetched

    # reading --------------------------------------------------------------------------------
    async def perceive(self, event: Event) -> Event:
        """`event` with its attachments read into its text (the sender's words kept in
        `meta["sent_text"]`); the event itself when it has none, or was read already (a stored
        event submitted again by a replaying surface: read and paid for once)."""
        if not event.attachments or "sent_text" in event.meta:
            return event
        where = (channel_key(event.service, event.channel),)  # the channel it was sent on, only
        with usage_context.rebind(agent_id=event.agent_id, surface=event.service, channel=event.channel):
            seen = [await self._read(event.agent_id, attachment, where) for attachment in event.attachments]
        text = " ".join([*seen, event.text]).strip()
        meta = {**event.meta, "sent_text": event.text}
        return event.model_copy(update={"text": text, "meta": meta})

    async def _read(self, agent_id: str, attachment: Attachment, where: Sequence[str]) -> str:
        kept = self.library.get(agent_id, attachment.reference, where)
        if kept is None:  # never kept, swept, or kept in another compartment: all the same here
            return GONE_ORIGINAL
        try:
            data = await asyncio.to_thread(self.library.read, kept)
        except OSError:  # swept between the two reads
            return GONE_ORIGINAL
        if attachment.kind is AttachmentKind.IMAGE:
            return await self._look(agent_id, data, attachment)
        if attachment.kind is AttachmentKind.AUDIO:
            return await self._hear(agent_id, data, attachment)
        return await self._read_document(data, attachment)

    async def _look(self, agent_id: str, data: bytes, attachment: Attachment) -> str:
        gateway = self._gateways.get(agent_id)
        if gateway is None:
            return "[an image I could not look at: no model is running in this process]"
        try:
            sees = await gateway.can_see(Task.CAPTION)
        except PersynError as exc:  # the caption model cannot be built (a key missing, a bad string)
            return f"[an image I could not look at: {exc}]"
        if not sees:
            return (
                f"[an image ({attachment.filename or attachment.media_type}) that I could not see: "
                "my model cannot see images]"
            )
        name = f" ({attachment.filename})" if attachment.filename else ""
        prompt = Prompt(
            system=_CAPTION_SYSTEM,
            items=(
                UserTurn(
                    text=f"Describe this image{name}.",
                    images=(ImageInput(data=data, media_type=attachment.media_type),),
                ),
            ),
        )
        try:
            completion = await gateway.complete(Task.CAPTION, prompt, stage=CAPTION_STAGE)
        except PersynError as exc:  # ModelError, a provider's refusal, among them
            log.warning("captioning %s failed: %s", attachment.reference, exc)
            return f"[an image I could not look at: {exc}]"
        caption = " ".join(completion.text.split()) or "nothing I could describe"
        return f"[photo: {caption}]"

    async def _hear(self, agent_id: str, data: bytes, attachment: Attachment) -> str:
        gateway = self._gateways.get(agent_id)
        if gateway is None:
            return "[a voice note I could not listen to: no model is running in this process]"
        try:
            declared = float(attachment.meta.get("seconds", "0"))  # from its header, before decoding
            transcript = await gateway.transcribe(
                self._transcriber_for(), data, attachment.media_type, declared
            )
        except (ModelError, InputError, OSError) as exc:  # a refused budget among them
            log.warning("transcribing %s failed: %s", attachment.reference, exc)
            return f"[a voice note I could not listen to: {exc}]"
        except Exception as exc:  # a configuration error (the `local` extra missing) among them
            log.warning("transcribing %s failed", attachment.reference, exc_info=True)
            return f"[a voice note I could not listen to: {exc}]"
        words = " ".join(transcript.text.split())
        return (
            f'[voice note, {transcript.seconds:.0f} s: "{words}"]'
            if words
            else "[a voice note with no words]"
        )

    def _transcriber_for(self) -> Transcriber:
        if self._transcriber is None:
            self._transcriber = build_transcriber(
                self.settings.models.transcribe, language=self.limits.transcribe_language
            )
        return self._transcriber

    async def _read_document(self, data: bytes, attachment: Attachment) -> str:
        name = attachment.filename or attachment.media_type
        try:
            document = await asyncio.to_thread(read_document, data, attachment.media_type, self.limits)
        except MediaRejected as exc:
            return f"[a document I could not read, {name}: {exc.reason}]"
        pages = f", {document.pages} page{'s' if document.pages != 1 else ''}" if document.pages else ""
        more = document.page_count
        if more > 1:  # the rest stays in the kept original, for the model to read on
            cut = (
                f" …(cut: page 1 of {more} of its text; read_attachment with reference "
                f"{attachment.reference} and page 2 reads on)"
            )
        else:
            cut = " …(cut)" if document.truncated else ""
        return f"[document {name}{pages}: {document.page(1)}{cut}]"


def _safe_filename(name: str | None) -> str | None:
    """The last path part of a sender's file name, without brackets or line breaks (it is shown
    in the prompt), at most 200 characters."""
    if not name:
        return None
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(
        " " if not c.isprintable() else "(" if c == "[" else ")" if c == "]" else c for c in base
    )
    cleaned = " ".join(cleaned.split())[:200]
    return cleaned or None
