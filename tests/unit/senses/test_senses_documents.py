"""`read_document`: a hand-written PDF, pypdf's pages, text in several charsets and HTML, each
read to bounded text."""

from __future__ import annotations

import io

import pytest
from media_samples import blank_pdf
from pypdf import PdfWriter

from persyn.core.config.senses import SensesConfig
from persyn.senses.documents import DocumentText, read_document
from persyn.senses.media import MediaRejected, inspect_media
from persyn.testing.media import text_pdf


def multi_page_pdf(texts: list[str]) -> bytes:
    writer = PdfWriter()
    for text in texts:
        page = PdfWriter(io.BytesIO(text_pdf(text))).pages[0]
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdf_is_read_to_its_text(limits: SensesConfig) -> None:
    data = text_pdf("The red bicycle is leaning on the fence")
    info = inspect_media(data, "application/pdf", None, limits)
    assert read_document(data, info.media_type, limits) == DocumentText(
        text="The red bicycle is leaning on the fence", pages=1, truncated=False
    )


def test_a_long_pdf_is_cut_at_the_character_limit_and_says_so() -> None:
    limits = SensesConfig(document_max_chars=100)
    pages = [f"Page number {n} says something worth reading about bicycles" for n in range(1, 9)]
    document = read_document(multi_page_pdf(pages), "application/pdf", limits)
    assert document.pages == 8 and document.truncated
    assert len(document.text) <= 100
    assert document.text.startswith("Page number 1 says something")
    assert "Page number 8" not in document.text


def test_every_page_is_read_when_it_fits(limits: SensesConfig) -> None:
    document = read_document(multi_page_pdf(["First page", "Second page"]), "application/pdf", limits)
    assert document == DocumentText(text="First page\n\nSecond page", pages=2, truncated=False)


def test_the_page_limit_holds_whoever_calls(limits: SensesConfig) -> None:
    with pytest.raises(MediaRejected) as caught:
        read_document(blank_pdf(101), "application/pdf", limits)
    assert caught.value.limit == "document_max_pages"


def test_an_encrypted_pdf_is_refused(limits: SensesConfig) -> None:
    with pytest.raises(MediaRejected, match="encrypted with a password"):
        read_document(blank_pdf(1, password="secret"), "application/pdf", limits)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"plain words\r\n", "plain words"),
        (
            "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, s'il vous pla\u00eet".encode("cp1252"),
            "café crème brûlée, s'il vous plaît",
        ),
        ("\u00fcber die Br\u00fccke".encode("utf-16"), "über die Brücke"),
        (
            "Привет, как дела? Это текст на русском языке.".encode("cp1251"),
            "Привет, как дела? Это текст на русском языке.",
        ),
        (
            "Zażółć gęślą jaźń, to jest polski tekst".encode("cp1250"),
            "Zażółć gęślą jaźń, to jest polski tekst",
        ),
        ("\ufeffwith a byte-order mark".encode(), "with a byte-order mark"),
    ],
)
def test_text_is_decoded_by_a_charset_guess(data: bytes, text: str, limits: SensesConfig) -> None:
    assert read_document(data, "text/plain", limits) == DocumentText(text=text, pages=None, truncated=False)


def test_markdown_is_kept_as_written_and_bounded() -> None:
    limits = SensesConfig(document_max_chars=100)
    data = ("# Notes\n\n" + "- a point worth making\n" * 20).encode()
    document = read_document(data, "text/markdown", limits)
    assert document.truncated and len(document.text) <= 100
    assert document.text.startswith("# Notes\n\n- a point worth making")


def test_html_becomes_its_readable_text(limits: SensesConfig) -> None:
    page = b"""<!DOCTYPE html><html><head><title>Shop</title><script>var secret = 1;</script>
    <style>p { color: red }</style></head><body><nav><a href="/">Home</a></nav>
    <article><h1>The red bicycle</h1><p>It has been leaning on the fence since Tuesday, and
    nobody has come to collect it. The owner, it seems, has forgotten all about it.</p></article>
    </body></html>"""
    info = inspect_media(page, "text/html", "shop.html", limits)
    document = read_document(page, info.media_type, limits)
    assert "leaning on the fence since Tuesday" in document.text
    assert "<" not in document.text and "secret" not in document.text and "color" not in document.text
    assert document.pages is None and not document.truncated


def test_a_type_that_is_no_document_is_refused(limits: SensesConfig) -> None:
    with pytest.raises(MediaRejected, match="'image/png' is not a document type"):
        read_document(b"\x89PNG", "image/png", limits)


def test_a_huge_page_is_read_in_bounded_work(limits: SensesConfig) -> None:
    """10 MB of HTML: only its first 2 MB are converted (plain-text conversion, no extraction),
    and the text says it was cut."""
    paragraph = b"<div><p>Some paragraph about bicycles and fences, again and again.</p></div>"
    page = b"<html><body>" + paragraph * 140_000 + b"<p>THE VERY END</p></body></html>"
    assert len(page) > 10_000_000
    info = inspect_media(page, "text/html", None, SensesConfig(document_max_bytes=20_000_000))
    document = read_document(page, info.media_type, limits)
    assert document.truncated and len(document.text) <= limits.document_max_chars
    assert document.text.startswith("Some paragraph about bicycles") and "THE VERY END" not in document.text


def test_a_small_page_cut_by_the_character_limit_says_so() -> None:
    page = (
        b"<html><body><article>"
        + b"<p>A sentence about a red bicycle.</p>" * 50
        + b"</article></body></html>"
    )
    document = read_document(page, "text/html", SensesConfig(document_max_chars=200))
    assert document.truncated and document.text.startswith("A sentence about a red bicycle.")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "cp1252"])
def test_a_long_text_is_decoded_only_as_far_as_it_is_kept(encoding: str) -> None:
    """The byte cut (at 400 bytes here) lands inside a character (é is two bytes in UTF-8): that
    character is dropped, not turned into an error or a replacement sign, and the text says it
    was cut."""
    limits = SensesConfig(document_max_chars=100)
    text = (
        "Ordered at the corner table on a Tuesday:  " + "Un café crème, s'il vous plaît, et l'addition. " * 20
    )
    if encoding == "utf-8":  # the cut is where it should be: inside the é of the eighth "café"
        with pytest.raises(UnicodeDecodeError):
            text.encode()[:400].decode()
    document = read_document(text.encode(encoding), "text/plain", limits)
    assert document == DocumentText(text=text[:100].rstrip(), pages=None, truncated=True)
