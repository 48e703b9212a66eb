"""`read_attachment` through the real runtime (issue 35, "the part kept for 'remember
harder'"): a long document enters the turn as its first page of text, naming its reference and
how to read on; the respond model (the scripted double, `test:script`) calls the tool in the
turn's tool loop and is shown page 2 — re-read from the kept original, a multi-page PDF made
with pypdf from `persyn.testing.media.text_pdf` pages, or a long text file — with words that
are on page 2 only. An image reference is answered with what it is; a page past the end is the
tool's refusal; an original whose bytes are gone reads "no longer kept"."""

from __future__ import annotations

import io
import json
from pathlib import Path

from pypdf import PdfReader, PdfWriter

from persyn.core.events import Attachment, Upload
from persyn.senses.documents import PAGE_CHARS
from persyn.testing import Pilot, run_runtime
from persyn.testing.media import small_png, text_pdf

NO_DELIBERATION = "[deliberation]\nenabled = false\n"
FILLER = "The committee reviewed the quarterly figures and found them in order. "  # 70 characters
SECRET = "The spare key hides under the blue heron statue."


def long_pdf() -> bytes:
    """Three PDF pages: two of filler (over one text page of it), the last with `SECRET`."""
    writer = PdfWriter()
    for lines in ([FILLER] * 30, [FILLER] * 30, [SECRET]):
        writer.append(PdfReader(io.BytesIO(text_pdf(*lines))))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _script(path: Path, rules: list[dict[str, object]]) -> None:
    path.write_text(json.dumps(rules), encoding="utf-8")


def _reads(reference: str, page: int, match: str) -> dict[str, object]:
    call = {"name": "read_attachment", "args": {"reference": reference, "page": page}}
    return {"task": "respond", "match": match, "tool_calls": [call], "times": 1}


async def _keep(pilot: Pilot, upload: Upload, channel: str = "room") -> Attachment:
    (kept,) = await pilot.runtime.keep_attachments(pilot.agent.id, "test", channel, "sam", [upload])
    return kept


async def _send(pilot: Pilot, text: str, kept: Attachment, channel: str = "room") -> tuple[str, str]:
    """The reply, and the event's text as the turn read it."""
    await pilot.idle()
    event = pilot.event(text, channel=channel).model_copy(update={"attachments": (kept,)})
    marker = await pilot.submit(event)
    assert marker.transmitted, marker
    stored = await pilot.runtime.get_event(pilot.agent.id, event.id)
    assert stored is not None
    return marker.text or "", stored.text


def _result(reply: str) -> dict[str, object]:
    prefix = "Tool read_attachment returned: "
    assert reply.startswith(prefix), reply
    return json.loads(reply.removeprefix(prefix))


async def test_the_owner_reads_page_two_of_a_kept_pdf_in_a_turn(tmp_path: Path) -> None:
    data = long_pdf()
    assert len(PdfReader(io.BytesIO(data)).pages) == 3
    rules = tmp_path / "rules.json"
    _script(rules, [])
    async with run_runtime(tmp_path / "home", model=f"test:script@{rules}", config=NO_DELIBERATION) as pilot:
        kept = await _keep(pilot, Upload(data=data, filename="minutes.pdf"))
        _script(rules, [_reads(kept.reference, 2, "where is the key")])
        reply, said = await _send(pilot, "where is the key?", kept)
        page = _result(reply)
        assert page["reference"] == kept.reference and page["kind"] == "document"
        assert page["filename"] == "minutes.pdf"
        assert page["page"] == 2 and page["pages"] == 2
        assert SECRET in str(page["text"])
        assert page["note"] == "page 2 of 2, the end of the document"
        # The turn showed page 1 only, and said how to read on.
        assert said.startswith("[document minutes.pdf, 3 pages: The committee reviewed")
        assert SECRET not in said and "heron" not in said
        tail = f" …(cut: page 1 of 2 of its text; read_attachment with reference {kept.reference} and page 2 reads on)]"
        assert said.endswith(tail + " where is the key?")
        assert len(said) - len(tail) < PAGE_CHARS + 100


async def test_a_long_text_file_pages_on_to_its_end_and_no_further(tmp_path: Path) -> None:
    words = " ".join(f"line{number:05d}" for number in range(1500))  # 14,999 characters: 4 pages
    rules = tmp_path / "rules.json"
    _script(rules, [])
    async with run_runtime(tmp_path / "home", model=f"test:script@{rules}", config=NO_DELIBERATION) as pilot:
        kept = await _keep(pilot, Upload(data=words.encode(), filename="log.txt"))
        _script(
            rules,
            [
                _reads(kept.reference, 3, "third"),
                _reads(kept.reference, 4, "last"),
                _reads(kept.reference, 5, "past"),
            ],
        )
        reply, said = await _send(pilot, "the third page", kept)
        assert "page 1 of 4 of its text" in said and "line00400" not in said
        third = _result(reply)
        assert third["page"] == 3 and third["pages"] == 4 and third["note"] == "page 3 of 4; page 4 reads on"
        assert str(third["text"]) == words[2 * PAGE_CHARS : 3 * PAGE_CHARS]
        reply, _ = await _send(pilot, "the last page", kept)
        last = _result(reply)
        assert (
            str(last["text"]).endswith("line01499") and last["note"] == "page 4 of 4, the end of the document"
        )
        reply, _ = await _send(pilot, "past the end", kept)
        assert "Tool 'read_attachment' failed: there is no page 5: the text has 4 pages" in reply, reply


async def test_an_image_is_said_to_be_one_and_bytes_gone_read_as_no_longer_kept(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    _script(rules, [])
    async with run_runtime(tmp_path / "home", model=f"test:script@{rules}", config=NO_DELIBERATION) as pilot:
        photo = await _keep(pilot, Upload(data=small_png(), filename="sky.png"))
        document = await _keep(pilot, Upload(data=b"A short note about the ferry.", filename="note.txt"))
        _script(rules, [_reads(photo.reference, 1, "what page"), _reads(document.reference, 1, "again")])
        reply, _ = await _send(pilot, "what page is it on?", photo)
        image = _result(reply)
        assert image["kind"] == "image" and image["page"] == 0
        assert (
            image["text"]
            == "[this is an image (sky.png), 48×32 pixels, not a document: it has no pages of text]"
        )
        reply, said = await _send(pilot, "read it again", document)
        assert (
            said == "[document note.txt: A short note about the ferry.] read it again"
        )  # one page: no more said
        assert _result(reply)["text"] == "A short note about the ferry."
        folder = pilot.settings.data_dir / "attachments" / pilot.agent.id
        (data_file,) = [p for p in folder.glob(f"{document.reference}.*") if p.suffix != ".json"]
        data_file.unlink()  # its metadata stays: swept between the two reads
        _script(rules, [_reads(document.reference, 1, "once more")])
        await pilot.idle()
        marker = await pilot.submit(pilot.event("once more"))
        assert _result(marker.text or "")["text"] == "[a file that is no longer kept]"
