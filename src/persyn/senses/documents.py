"""Reading: a sent document to text (issue 35 item 2), bounded.

A PDF through pypdf, page by page until `[senses] document_max_chars` (an encrypted or broken
PDF is refused, as is one past `document_max_pages`, whoever calls this); plain text and
Markdown decoded with a guess at their charset; HTML to its readable text with trafilatura
(its main content, or its plain-text conversion when it finds none), as the web reader does.
What is cut is marked: `DocumentText.truncated`. Blocking work: callers run it in a thread.

**Pages.** The text is read in pages of `PAGE_CHARS` (its whitespace folded to single spaces,
`DocumentText.flat`): the turn shows the first (`runtime/turn/senses.py`), and the
`read_attachment` tool (`tools/builtin/attachments.py`) any other, from the kept original — so a
document's pages are at most `document_max_chars / PAGE_CHARS` (5 with the defaults).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from persyn.core.config.senses import SensesConfig
from persyn.senses.media import DOCUMENT_TYPES, MediaRejected, open_pdf

__all__ = ["PAGE_CHARS", "DocumentText", "decode_text", "read_document"]

# A page of a document's text: what the turn shows of it, and what `read_attachment` returns.
PAGE_CHARS = 4000

# trafilatura's extraction takes about 7 s per MB of HTML on a busy 2-core machine (load 15),
# its plain-text conversion about 0.6 s: a sent page gets the extraction up to half a megabyte
# and the conversion of its first 2 MB beyond that (the text kept is 20,000 characters anyway).
_HTML_EXTRACT_CHARS = 500_000
_HTML_MAX_CHARS = 2_000_000
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True)
class DocumentText:
    """A document's text (at most `document_max_chars`), its page count (PDF only) and whether
    text was cut to fit."""

    text: str
    pages: int | None
    truncated: bool

    @property
    def flat(self) -> str:
        """The text with its whitespace folded to single spaces (as a prompt shows it)."""
        return " ".join(self.text.split())

    @property
    def page_count(self) -> int:
        """How many `PAGE_CHARS` pages the flat text fills (1 for an empty text)."""
        return max(1, -(-len(self.flat) // PAGE_CHARS))

    def page(self, number: int) -> str:
        """Page `number` (1-based) of the flat text; '' past the last."""
        return self.flat[(number - 1) * PAGE_CHARS : number * PAGE_CHARS] if number >= 1 else ""


def read_document(data: bytes, media_type: str, limits: SensesConfig) -> DocumentText:
    """The text of a document whose type `media.inspect_media` sniffed (`application/pdf`,
    `text/plain`, `text/markdown`, `text/html`)."""
    if media_type not in DOCUMENT_TYPES:
        raise MediaRejected(f"{media_type!r} is not a document type I can read")
    if len(data) > limits.document_max_bytes:
        raise MediaRejected(
            f"the document is {len(data)} bytes; the limit is {limits.document_max_bytes}",
            "document_max_bytes",
        )
    if media_type == "application/pdf":
        return _pdf_text(data, limits)
    if media_type != "text/html":
        # Four bytes hold any character: past that many, the bytes cannot be in the text kept,
        # and decoding them (charset guessing included) is work for nothing.
        head = data[: limits.document_max_chars * 4]
        cut = len(head) < len(data)
        document = _bounded(decode_text(head, complete=not cut).strip(), None, limits.document_max_chars)
        return DocumentText(document.text, None, document.truncated or cut)
    text = decode_text(data)
    cut = len(text) > _HTML_MAX_CHARS
    document = _bounded(_html_text(text[:_HTML_MAX_CHARS]).strip(), None, limits.document_max_chars)
    return DocumentText(document.text, None, document.truncated or cut)


def decode_text(data: bytes, *, complete: bool = True) -> str:
    """Bytes as text: by their byte-order mark, else UTF-8, else charset-normalizer's guess
    (trafilatura's own dependency), else Latin-1, which decodes anything. `complete=False`: the
    bytes are the head of a longer text, so a character cut in two at the end is dropped, not an
    error."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return codecs.getincrementaldecoder(encoding)(errors="replace").decode(data, final=complete)
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=complete)
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    # On a short text several single-byte charsets fit about as well and the guess among them is
    # a coin toss ("crème" read as cp1250's "crčme"); Windows-1252, the commonest, wins when it
    # is among those that fit at all.
    western = next((match for match in matches if match.encoding == "cp1252"), None)
    chosen = western or (matches[0] if matches else None)
    return str(chosen) if chosen is not None else data.decode("latin-1")


def _pdf_text(data: bytes, limits: SensesConfig) -> DocumentText:
    reader = open_pdf(data)
    pages = len(reader.pages)
    if pages > limits.document_max_pages:
        raise MediaRejected(
            f"the PDF has {pages} pages; the limit is {limits.document_max_pages}", "document_max_pages"
        )
    parts: list[str] = []
    kept = 0
    truncated = False
    for number, page in enumerate(reader.pages):
        if kept > limits.document_max_chars:
            truncated = number < pages
            break
        try:
            text = page.extract_text() or ""
        except Exception as exc:  # pypdf's content-stream errors are many types: any means "corrupt"
            raise MediaRejected(f"the PDF is corrupt: page {number + 1} cannot be read") from exc
        text = text.strip()
        if text:
            parts.append(text)
            kept += len(text) + 2
    document = _bounded("\n\n".join(parts), pages, limits.document_max_chars)
    return DocumentText(document.text, pages, document.truncated or truncated)


def _html_text(html: str) -> str:
    """The page's main content (trafilatura's extraction) when the page is small enough for it,
    else, as when it finds none, all of its text (`html2txt`, menus and all)."""
    import trafilatura  # imported on first use: it loads lxml and language data

    extracted = (
        trafilatura.extract(html, include_comments=False) if len(html) <= _HTML_EXTRACT_CHARS else None
    )
    return extracted or trafilatura.html2txt(html) or ""


def _bounded(text: str, pages: int | None, max_chars: int) -> DocumentText:
    if len(text) <= max_chars:
        return DocumentText(text, pages, False)
    return DocumentText(text[:max_chars].rstrip(), pages, True)
