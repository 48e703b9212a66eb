"""Matrix message content in and out, for the Matrix adapter (`channel.py`): which messages are
text to answer, a reply's body without its quoted fallback, whether a text names the agent, the
order of a batch's arrival times, and a reply's Markdown rendered as `formatted_body`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from markdown_it import MarkdownIt

from persyn.core.events import Event

__all__ = ["TEXT_TYPES", "in_timeline_order", "mentions_name", "render_html", "without_reply_fallback"]

TEXT_TYPES = ("m.text", "m.emote")  # m.notice is for bots' output: never answered (spec)
# Apart in one room's batch: a millisecond, the resolution of the dialog's ids' time part.
_ORDER_STEP = timedelta(milliseconds=1)

_markdown = MarkdownIt("commonmark", {"html": False}).disable("image")


def render_html(text: str) -> str:
    """`text` (Markdown) as the HTML of `formatted_body`. Raw HTML in it is escaped, links with
    unsafe schemes are not links, images are off; one plain paragraph loses its `<p>`."""
    html = _markdown.render(text).strip()
    if html.startswith("<p>") and html.endswith("</p>") and html.count("<p>") == 1:
        return html[3:-4]
    return html


def without_reply_fallback(body: str) -> str:
    """A reply's body without the quoted original older clients put before it."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    return "\n".join(lines[index:]).lstrip("\n")


def mentions_name(text: str, name: str) -> bool:
    return (
        bool(name) and re.search(rf"(?<![\w@-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE) is not None
    )


def in_timeline_order(events: list[tuple[str, str, Event]]) -> list[tuple[str, str, Event]]:
    """The batch's events with arrival times that rise strictly in each room's timeline order.

    The events of one batch are taken in one go, so they share a clock reading (or the
    homeserver's millisecond), and their turns may finish in any order: the dialog, read in
    (time, id) order, would then show them shuffled. Walking back from each room's last
    message, an event stamped no earlier than the one after it is put a millisecond before it —
    never later than it was, so never later than the clock (the pipeline keeps an arrival time
    only if it is not in the future)."""
    later: dict[str, datetime] = {}
    ordered: list[tuple[str, str, Event]] = []
    for room_id, matrix_id, event in reversed(events):
        stamp = event.received_at
        after = later.get(room_id)
        if after is not None and stamp >= after:
            stamp = after - _ORDER_STEP
            event = event.model_copy(update={"received_at": stamp})
        later[room_id] = stamp
        ordered.append((room_id, matrix_id, event))
    ordered.reverse()
    return ordered
