"""Images (ARCHITECTURE §21): `generate_image` and `edit_image`, the image provider port and
the image library.

A render takes tens of seconds, so the tools only *ask*: each writes a pending job under a
reference (`img-<ULID>`) and answers at once; the runtime renders it in the background
(`runtime/turn/images.py`) and delivers it through the outbox. The library keeps every image as a
file under `<data>/images/` with its metadata beside it (`<ref>.json`), scoped like the
shared artifacts: the channel key of the conversation that asked for it. An image is visible
from that channel and its compartment only; from anywhere else a reference is answered
exactly like one that does not exist.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from persyn.core.errors import ToolError
from persyn.core.events import ATTACHMENT_REFERENCE
from persyn.core.ids import id_time
from persyn.tools.registry import Tool

__all__ = [
    "IMAGE_REFERENCE",
    "ImageJob",
    "ImageLibrary",
    "ImageProvider",
    "ImageRenderError",
    "ImagesContext",
    "RenderedImage",
    "StoredImage",
    "image_tools",
    "sniff_mime",
]

IMAGE_REFERENCE = re.compile(r"\bimg-[0-9A-HJKMNP-TV-Z]{26}\b")
MAX_REFERENCES = 16  # images one edit composes from: what OpenAI's images edit endpoint takes
_SIZE = re.compile(r"auto|[1-9][0-9]{1,4}x[1-9][0-9]{1,4}")
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}


class ImageRenderError(Exception):
    """A render that failed: the provider refused, answered badly, too much, or too late.
    The message is for the agent (it is told the render failed and why)."""


class RenderedImage(BaseModel):
    model_config = ConfigDict(frozen=True)

    data: bytes
    mime: str
    revised_prompt: str | None = None


class ImageProvider(Protocol):
    """Renders one image (SPEC §4.6 images): the OpenAI images API and compatible servers
    (`tools/images/openai_images.py`). Raises `ImageRenderError` for every failure."""

    async def generate(self, prompt: str, size: str) -> RenderedImage: ...

    async def edit(self, images: Sequence[tuple[bytes, str]], prompt: str, size: str) -> RenderedImage:
        """`images` (bytes, media type), the first the one edited and the rest references to
        compose from (SPEC §4.6)."""
        ...


class ImageJob(BaseModel):
    """A render asked for: what the background render needs, and whom it is for."""

    model_config = ConfigDict(frozen=True)

    reference: str
    kind: Literal["generate", "edit"]
    prompt: str
    size: str
    based_on: str | None = None  # edit: the reference of the image edited
    # edit: every image it composes from, `based_on` first (img- made here, att- received);
    # empty in a job written before there could be several: then `based_on` alone.
    references: tuple[str, ...] = ()
    agent_id: str
    scope: str  # the channel key it was asked for on (its visibility)
    service: str
    channel: str
    person_id: str | None = None
    conversation_id: str | None = None
    thread_id: str  # the activation (workflow) that asked: attribution and the autonomy budget
    requested_at: datetime
    trigger: str | None = None  # what set that activation going (`UsageRecord.trigger`); None: an older job


class StoredImage(BaseModel):
    """One image of the library, as its metadata file holds it."""

    model_config = ConfigDict(frozen=True)

    reference: str
    scope: str
    agent_id: str
    source: Literal["generated", "edited", "received"]
    prompt: str = ""
    revised_prompt: str | None = None
    based_on: str | None = None
    model: str | None = None
    size: str | None = None
    mime: str
    bytes: int
    sha256: str
    file: str  # the image's file name in the library's directory
    created_at: datetime


def sniff_mime(data: bytes) -> str | None:
    """The image type from its first bytes (what a provider says it sent is not trusted)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


class ImageLibrary:
    """Images as files under one directory: `<ref>.<ext>` and `<ref>.json`; pending jobs
    under `jobs/<ref>.json`. Every write goes to a temporary file renamed into place, so a
    reader never sees half an image or half its metadata."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)

    def _meta_path(self, reference: str) -> Path:
        if not IMAGE_REFERENCE.fullmatch(reference):
            raise ToolError(f"{reference!r} is not an image reference (img- and 26 letters and digits)")
        return self.directory / f"{reference}.json"

    def put_job(self, job: ImageJob) -> None:
        self._write(self.directory / "jobs" / f"{job.reference}.json", job.model_dump_json().encode())

    def job(self, reference: str) -> ImageJob | None:
        path = self.directory / "jobs" / f"{reference}.json"
        try:
            return ImageJob.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            return None

    def asked_since(self, agent_id: str, since: datetime) -> int:
        """How many renders `agent_id` asked for since `since`, pending or kept (a reference's
        ULID carries when it was asked for, so only recent files are read)."""
        asked: set[str] = set()  # a job rendered and not yet delivered has both files
        for folder in (self.directory / "jobs", self.directory):
            for path in folder.glob("img-*.json") if folder.is_dir() else ():
                reference = path.stem
                if not IMAGE_REFERENCE.fullmatch(reference) or _asked_at(reference) < since:
                    continue
                try:
                    owner = json.loads(path.read_bytes()).get("agent_id")
                except (OSError, ValueError):
                    continue
                if owner == agent_id:
                    asked.add(reference)
        return len(asked)

    def end_job(self, reference: str) -> None:
        (self.directory / "jobs" / f"{reference}.json").unlink(missing_ok=True)

    def store(
        self,
        reference: str,
        data: bytes,
        *,
        scope: str,
        agent_id: str,
        source: Literal["generated", "edited", "received"],
        created_at: datetime,
        prompt: str = "",
        revised_prompt: str | None = None,
        based_on: str | None = None,
        model: str | None = None,
        size: str | None = None,
    ) -> StoredImage:
        """Keep `data` (an image of a known type, else `ImageRenderError`) under `reference`."""
        mime = sniff_mime(data)
        if mime is None:
            raise ImageRenderError("the provider sent something that is not a PNG, JPEG, WebP or GIF image")
        meta_path = self._meta_path(reference)
        file = f"{reference}.{_EXTENSIONS[mime]}"
        self._write(self.directory / file, data)
        stored = StoredImage(
            reference=reference,
            scope=scope,
            agent_id=agent_id,
            source=source,
            prompt=prompt,
            revised_prompt=revised_prompt,
            based_on=based_on,
            model=model,
            size=size,
            mime=mime,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            file=file,
            created_at=created_at,
        )
        self._write(meta_path, stored.model_dump_json().encode())  # last: the image exists now
        return stored

    def get(self, reference: str, eligible: Sequence[str]) -> StoredImage | None:
        """The image, if it exists and its scope is one of `eligible` (else None: a stranger
        cannot tell an image elsewhere from no image)."""
        try:
            stored = StoredImage.model_validate_json(self._meta_path(reference).read_bytes())
        except (OSError, ValidationError):
            return None
        return stored if stored.scope in eligible else None

    def path(self, stored: StoredImage) -> Path:
        return self.directory / stored.file

    def read(self, stored: StoredImage) -> bytes:
        return self.path(stored).read_bytes()


def _asked_at(reference: str) -> datetime:
    return id_time(reference.removeprefix("img-"))


def decode_b64_image(value: object) -> bytes:
    """A `b64_json` field's image bytes, or `ImageRenderError` naming what was wrong."""
    if not isinstance(value, str) or not value:
        raise ImageRenderError("the provider's answer has no b64_json image")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise ImageRenderError(f"the provider's b64_json is not base64: {exc}") from exc


# the tools -----------------------------------------------------------------------------------
class GenerateImageInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, description="What to draw, in detail.")
    size: str | None = Field(
        default=None, description="WIDTHxHEIGHT, e.g. 1024x1024 (default: the configured size)."
    )


class EditImageInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str = Field(
        description="The image to edit: its reference, img-... (one you made) or att-... (one you were sent)."
    )
    more_references: list[str] = Field(
        default_factory=list[str],
        max_length=MAX_REFERENCES - 1,
        description="More images to compose from (img-... or att-...), e.g. a face to put in the scene.",
    )
    prompt: str = Field(min_length=1, description="What to change.")
    size: str | None = Field(default=None, description="WIDTHxHEIGHT (default: the configured size).")


class ImageRequested(BaseModel):
    reference: str
    status: Literal["rendering"] = "rendering"
    note: str


@dataclass(frozen=True)
class ImagesContext:
    """What the image tools are bound to for one activation."""

    library: ImageLibrary
    eligible: tuple[str, ...]  # the channel keys whose images this activation may see
    default_size: str
    max_prompt_chars: int
    # Records the pending job for `kind`, `prompt`, `size`, the images an edit composes from
    # (none for a generation); returns its reference.
    request: Callable[[Literal["generate", "edit"], str, str, tuple[str, ...]], Awaitable[str]]
    # Whether an `att-` reference is an image someone sent that this activation may see (its
    # channel among `eligible`); without a library of received files, none is.
    received: Callable[[str, tuple[str, ...]], bool] = lambda reference, eligible: False


def _checked(ctx: ImagesContext, prompt: str, size: str | None) -> tuple[str, str]:
    prompt = prompt.strip()
    if not prompt:
        raise ToolError("the prompt is empty")
    if len(prompt) > ctx.max_prompt_chars:
        raise ToolError(f"the prompt has {len(prompt)} characters; at most {ctx.max_prompt_chars}")
    chosen = size or ctx.default_size
    if not _SIZE.fullmatch(chosen):
        raise ToolError(f"size {chosen!r} is not WIDTHxHEIGHT (e.g. 1024x1024) or auto")
    return prompt, chosen


_PROMISE = (
    "The image is being made; it is shown in this conversation when it is ready and you are told then. "
    "Do not ask for it again."
)


def image_tools(ctx: ImagesContext) -> list[Tool[Any, Any]]:
    async def generate(args: GenerateImageInput) -> ImageRequested:
        prompt, size = _checked(ctx, args.prompt, args.size)
        reference = await ctx.request("generate", prompt, size, ())
        return ImageRequested(reference=reference, note=_PROMISE)

    async def edit(args: EditImageInput) -> ImageRequested:
        prompt, size = _checked(ctx, args.prompt, args.size)
        sources: list[str] = []
        for asked in (args.reference, *args.more_references):
            wanted = asked.strip()
            seen = (
                ctx.received(wanted, ctx.eligible)
                if ATTACHMENT_REFERENCE.fullmatch(wanted)
                else IMAGE_REFERENCE.fullmatch(wanted) is not None
                and ctx.library.get(wanted, ctx.eligible) is not None
            )
            if not seen:  # elsewhere, another kind of file or none: all answered alike
                raise ToolError(f"there is no image {asked!r} that you can see here")
            if wanted not in sources:
                sources.append(wanted)
        reference = await ctx.request("edit", prompt, size, tuple(sources))
        return ImageRequested(reference=reference, note=_PROMISE)

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="generate_image",
            description=(
                "Draw an image from a description. Answers at once with its reference; the image "
                "is shown here when ready."
            ),
            input_model=GenerateImageInput,
            output_model=ImageRequested,
            handler=generate,
        ),
        Tool(
            name="edit_image",
            description=(
                "Change an image you can see (img-... you made, att-... you were sent) as described, "
                "composing in more of them if given; shown when ready."
            ),
            input_model=EditImageInput,
            output_model=ImageRequested,
            handler=edit,
        ),
    ]
    return tools
