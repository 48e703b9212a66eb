"""`read_attachment`: a document someone sent, read on past what the turn showed ("remember
harder", issue 35).

A document enters the turn as its first page of text (`senses.documents.PAGE_CHARS`); the
original is kept (`senses.library.AttachmentLibrary`), and this tool reads any page of it again
from the kept file, through `senses.documents.read_document` under the same `[senses]` limits,
so its pages are bounded by `document_max_chars`.

**Compartments.** An original is read exactly as `edit_image` reads a received image: only
when its scope (the channel it was sent on) is among this activation's eligible channels
(`memory.access.eligible_channels`, `[memory] channel_groups`). A reference kept elsewhere, a
forged one, one never kept and one swept (its metadata gone) all read the same
`NOT_HERE` — a stranger cannot tell a file in another compartment from no file. An original
this activation may see whose bytes are gone (swept between the two reads) reads
`senses.library.GONE_ORIGINAL`. An image or audio reference is answered with what it is, not
read (its caption or transcript was said when it was sent).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config.senses import SensesConfig
from persyn.core.errors import ToolError
from persyn.core.events import AttachmentKind
from persyn.senses.documents import PAGE_CHARS, read_document
from persyn.senses.library import GONE_ORIGINAL, AttachmentLibrary
from persyn.senses.media import MediaRejected
from persyn.tools.registry import Tool

__all__ = ["NOT_HERE", "AttachmentPage", "AttachmentsContext", "attachment_tools"]

# What a reference this activation may not see, or that names nothing, reads as.
NOT_HERE = "[a file that is not here]"


@dataclass(frozen=True)
class AttachmentsContext:
    """What `read_attachment` is bound to for one activation."""

    library: AttachmentLibrary
    agent_id: str
    eligible: tuple[str, ...]  # the channel keys whose originals this activation may read
    limits: SensesConfig


class ReadAttachmentInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str = Field(description="The file's reference, att-... (as the conversation shows it).")
    page: int = Field(
        default=1, ge=1, le=100_000, description=f"Which page of its text ({PAGE_CHARS} characters each)."
    )


class AttachmentPage(BaseModel):
    """One page of a kept document's text, or what the reference is when it is not one."""

    model_config = ConfigDict(frozen=True)

    reference: str
    kind: str
    filename: str | None = None
    page: int = 0  # 0: nothing paged (not a document, or nothing to show)
    pages: int = 0
    text: str
    note: str


def _not_a_document(
    reference: str, kind: AttachmentKind, filename: str | None, meta: dict[str, str]
) -> AttachmentPage:
    name = f" ({filename})" if filename else ""
    if kind is AttachmentKind.IMAGE:
        size = f", {meta['width']}×{meta['height']} pixels" if "width" in meta and "height" in meta else ""
        text = f"[this is an image{name}{size}, not a document: it has no pages of text]"
        note = "What it shows was said when it was sent; edit_image can use it."
    else:
        seconds = f", {meta['seconds']} s" if "seconds" in meta else ""
        text = f"[this is audio{name}{seconds}, not a document: it has no pages of text]"
        note = "Its words were heard and written into the conversation when it was sent."
    return AttachmentPage(reference=reference, kind=kind.value, filename=filename, text=text, note=note)


def attachment_tools(ctx: AttachmentsContext) -> list[Tool[Any, Any]]:
    async def read(args: ReadAttachmentInput) -> AttachmentPage:
        reference = args.reference.strip()
        kept = ctx.library.get(ctx.agent_id, reference, ctx.eligible)
        if kept is None:  # elsewhere, forged, never kept or swept: all answered alike
            return AttachmentPage(
                reference=reference, kind="unknown", text=NOT_HERE, note="No file by that reference is here."
            )
        if kept.kind is not AttachmentKind.DOCUMENT:
            return _not_a_document(reference, kept.kind, kept.filename, kept.meta)
        try:
            data = await asyncio.to_thread(ctx.library.read, kept)
        except OSError:  # swept between the two reads
            return AttachmentPage(
                reference=reference, kind=kept.kind.value, filename=kept.filename, text=GONE_ORIGINAL, note=""
            )
        try:
            document = await asyncio.to_thread(read_document, data, kept.media_type, ctx.limits)
        except MediaRejected as exc:
            raise ToolError(f"the document cannot be read: {exc.reason}") from exc
        pages = document.page_count
        if args.page > pages:
            raise ToolError(
                f"there is no page {args.page}: the text has {pages} page{'s' if pages != 1 else ''}"
            )
        if args.page < pages:
            note = f"page {args.page} of {pages}; page {args.page + 1} reads on"
        elif document.truncated:
            note = (
                f"page {pages} of {pages}, the last kept: the document goes on past the "
                f"{ctx.limits.document_max_chars} characters kept of it"
            )
        else:
            note = f"page {pages} of {pages}, the end of the document"
        return AttachmentPage(
            reference=reference,
            kind=kept.kind.value,
            filename=kept.filename,
            page=args.page,
            pages=pages,
            text=document.page(args.page),
            note=note,
        )

    return [
        Tool(
            name="read_attachment",
            description=(
                "Read on in a document you were sent (att-...): one page of its text at a time. The "
                "conversation shows its first page."
            ),
            input_model=ReadAttachmentInput,
            output_model=AttachmentPage,
            handler=read,
        )
    ]
