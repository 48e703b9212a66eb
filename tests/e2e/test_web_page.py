"""The chat page in a real browser (issue 16): Debian's headless Chromium driven by Playwright
(`executable_path`: Playwright never downloads a browser here) against `persyn run`.

Sends a message and sees the reply stream in, sees a withdrawn draft replaced by the reason
for silence, merges two contacts in the directory, and browses the channels. A screenshot of
each view is kept under the test's tmp directory (its path is printed)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browser import logged_in
from web_daemon import GARDEN, HELLO, SILENCE, WebDaemon, start

import needs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start(tmp_path_factory.mktemp("page"), keys={"ops": True, "alice": False})
    yield daemon
    daemon.stop()


@pytest.mark.skipif(shutil.which("chromium") is None, reason=needs.reason("Debian's chromium"))
def test_the_page_chats_streams_withdraws_and_curates_the_directory(web: WebDaemon, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    shots = tmp_path / "screenshots"
    shots.mkdir()
    print(f"\nscreenshots: {shots}")
    # A second contact to merge with: a client key says hello over the API.
    with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {web.keys['alice']}"}) as alice:
        said = alice.post(
            "/v1/chat/completions",
            json={"model": "Ada", "messages": [{"role": "user", "content": "hello"}]},
            timeout=60,
        )
        assert said.status_code == 200, said.text

    with logged_in(web.url, web.keys["ops"]) as page:
        # Chat: the reply streams in word by word, then is the sent reply.
        page.fill("#text", "hello from the browser")
        page.press("#text", "Enter")
        reply = page.locator(".msg.agent:not(.history) .body").last
        expect(reply).to_have_text(HELLO)
        assert int(page.get_attribute("body", "data-tokens") or 0) == len(HELLO.split())
        expect(page.locator(".msg.agent:not(.history)").last).not_to_have_class("msg agent draft")

        # A withdrawn draft: struck through, and the reason shown as a notice.
        page.fill("#text", GARDEN)
        page.press("#text", "Enter")
        expect(page.locator(".notice").last).to_contain_text(f"Ada chose silence: {SILENCE}")
        expect(page.locator(".msg.withdrawn")).to_have_count(1)
        page.screenshot(path=str(shots / "chat.png"), full_page=True)

        # The directory: two contacts (the operator key's and alice's), merged into one.
        page.click("button[data-view=directory]")
        picks = page.locator("#contacts input.pick")
        expect(picks).to_have_count(2)
        page.screenshot(path=str(shots / "directory.png"), full_page=True)
        picks.nth(0).check()
        picks.nth(1).check()
        page.click("#merge")
        expect(picks).to_have_count(1)
        expect(page.locator("#contact h3").first).to_have_text("Identities")
        expect(page.locator("#contact ul").first.locator("li")).to_have_count(2)
        page.screenshot(path=str(shots / "merged.png"), full_page=True)

        # The channels: web:<key> → its conversations → a dialog.
        page.click("button[data-view=channels]")
        channel = page.locator("#channels a").first
        expect(channel).to_contain_text("web:")
        channel.click()
        page.locator("#channel a").first.click()
        expect(page.locator("#dialog .msg").first).to_be_visible()
        page.screenshot(path=str(shots / "channels.png"), full_page=True)
    for name in ("chat", "directory", "merged", "channels"):
        assert (shots / f"{name}.png").stat().st_size > 0
    # The merge went through the directory: one contact left, with both identities.
    with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {web.keys['ops']}"}) as ops:
        (contact,) = ops.get("/v1/agents/Ada/contacts").json()["contacts"]
    speakers = {i["speaker_id"] for i in contact["person"]["identities"]}
    assert speakers == {web.key_ids["ops"], web.key_ids["alice"]}
