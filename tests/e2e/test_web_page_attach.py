"""The chat page sends files (issue 35) in a real browser (Debian's headless Chromium driven by
Playwright, as in test_web_page.py) against `persyn run` whose model is the `test:vision`
double, which captions an image from its pixels: a PNG chosen with the attach button, one
pasted into the message box and one dropped on the chat are each seen (their chips shown and
removable before sending), and a file the server refuses (over a `[senses]` limit, or the web
upload cap) shows the server's reason."""

from __future__ import annotations

import base64
import io
import shutil
from collections.abc import Iterator

import pytest
from browser import logged_in
from PIL import Image, ImageDraw
from web_daemon import WebDaemon, start

import needs
from persyn.testing.media import bomb_png, small_png

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RED_SQUARE = "a 160×100 picture of a red square on a white background"


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start(
        tmp_path_factory.mktemp("page-attach"),
        keys={"alice": False},
        PERSYN_MODELS__DEFAULT="test:vision",
        PERSYN_DELIBERATION__ENABLED="false",
        PERSYN_WEB__MAX_UPLOAD_BYTES=str(4 * 1_048_576),
    )
    yield daemon
    daemon.stop()


def _square_png() -> bytes:
    image = Image.new("RGB", (160, 100), "white")
    ImageDraw.Draw(image).rectangle((40, 20, 110, 80), fill=(220, 30, 30))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


# A browser event carrying a file, as a paste or a drop makes it (Playwright has no clipboard
# or drag of files from outside the page).
_DISPATCH = """([selector, kind, data, type]) => {
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], "", { type }));
  const init = { bubbles: true, cancelable: true };
  const event = kind === "paste"
    ? new ClipboardEvent("paste", { ...init, clipboardData: transfer })
    : new DragEvent(kind, { ...init, dataTransfer: transfer });
  document.querySelector(selector).dispatchEvent(event);
}"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason=needs.reason("Debian's chromium"))
def test_attached_pasted_and_dropped_images_are_seen_and_a_refusal_is_shown(web: WebDaemon) -> None:
    from playwright.sync_api import expect

    with logged_in(web.url, web.keys["alice"]) as page:
        replies = page.locator(".msg.agent:not(.history) .body")
        chips = page.locator("#chips .chip")

        # The attach button: two files chosen, one removed from its chip, then sent.
        page.set_input_files(
            "#attach",
            files=[
                {"name": "square.png", "mimeType": "image/png", "buffer": _square_png()},
                {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"not this one"},
            ],
        )
        expect(chips).to_have_count(2)
        expect(chips.nth(0)).to_contain_text("square.png")
        expect(chips.nth(0).locator("img")).to_have_count(1)  # an image's preview
        page.get_by_label("Remove notes.txt").click()
        expect(chips).to_have_count(1)
        page.fill("#text", "is this mine?")
        page.press("#text", "Enter")
        expect(replies.last).to_have_text(f"You said: [photo: {RED_SQUARE}] is this mine?")
        expect(chips).to_have_count(0)
        expect(page.locator(".msg.user .tag").last).to_have_text("[square.png]")

        # A pasted image, sent alone.
        blue = base64.b64encode(small_png()).decode()
        page.evaluate(_DISPATCH, ["#text", "paste", blue, "image/png"])
        expect(chips).to_have_count(1)
        expect(chips.nth(0)).to_contain_text("pasted-1.png")
        page.click("#send button[type=submit]")
        expect(replies).to_have_count(2)
        expect(replies.last).to_have_text("You said: [photo: a 48×32 picture, all blue]")

        # A dropped image on the chat.
        square = base64.b64encode(_square_png()).decode()
        page.evaluate(_DISPATCH, ["#view-chat", "drop", square, "image/png"])
        expect(chips).to_have_count(1)
        page.fill("#text", "and this one?")
        page.press("#text", "Enter")
        expect(replies).to_have_count(3)
        expect(replies.last).to_have_text(f"You said: [photo: {RED_SQUARE}] and this one?")

        # Refused by the server: its reason is shown, naming the limit.
        page.set_input_files(
            "#attach", files=[{"name": "bomb.png", "mimeType": "image/png", "buffer": bomb_png()}]
        )
        page.press("#text", "Enter")
        error = page.locator(".notice.error").last
        expect(error).to_contain_text("pixels")
        expect(error).to_contain_text("image_max_pixels")

        # Over the web upload cap (4 MB here; base64 makes 3.5 MB more than that): the cap named.
        page.set_input_files(
            "#attach", files=[{"name": "big.txt", "mimeType": "text/plain", "buffer": b"a" * 3_500_000}]
        )
        page.press("#text", "Enter")
        expect(page.locator(".notice.error")).to_have_count(2)
        expect(page.locator(".notice.error").last).to_contain_text("[web] max_upload_bytes")
        expect(replies).to_have_count(3)  # neither refusal was answered
