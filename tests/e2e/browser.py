"""The chat page in Debian's headless Chromium, driven by Playwright (`executable_path`:
Playwright never downloads a browser here), for the page's end-to-end tests: `logged_in` opens
the page, connects with a web key and waits for the agent (`log_in`), and closes the browser after."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page, ViewportSize

__all__ = ["CHROMIUM", "FLAGS", "WAIT_MS", "log_in", "logged_in"]

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling out of a closed network.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 60_000


@contextmanager
def logged_in(
    url: str,
    key: str,
    *,
    agent: str = "Ada",
    viewport: ViewportSize | None = None,
    args: Sequence[str] = (),
) -> Iterator[Page]:
    """The page at `url`, connected with `key` to `agent` (`args`: more Chromium flags)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*FLAGS, *args])
        try:
            page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
            log_in(page, url, key, agent=agent)
            yield page
        finally:
            browser.close()


def log_in(page: Page, url: str, key: str, *, agent: str = "Ada") -> None:
    """Open the page at `url` in `page` and connect with `key` (a second page of the same
    browser, for another key: Playwright's sync API runs one browser per thread)."""
    from playwright.sync_api import expect

    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    page.get_by_label("Key").fill(key)
    page.get_by_role("button", name="Connect").click()
    expect(page.locator("#status")).to_contain_text(f"connected to {agent}")
