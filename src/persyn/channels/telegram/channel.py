"""The Telegram adapter (SPEC §3): one agent as a bot, over the Bot API with long polling.

- `getUpdates` with a long-poll timeout; the offset moves past each update once it is
  submitted, so an update is confirmed to Telegram only after it is stored. An update seen
  again (a restart before the next poll confirmed it) is the same event: its id derives from
  the chat and the message id, and the store and the queue deduplicate.
- A private chat is addressed to the agent; in a group, a message that mentions the bot's
  @username or replies to one of its messages is. Privacy mode is the group's business: the
  bot sees what Telegram sends it, and nothing is done to see more.
- The sender is one contact per Telegram user (directory key `telegram`, `telegram`, user
  id) in every chat; Telegram's `is_bot` marks a bot's contact as `agent`.
- A message the agent starts to someone known only by their Telegram identity goes to their
  private chat (`chat_id` = their user id), once `sendChatAction` there is allowed
  (`direct_channel`: a person who never started the bot is a refusal the agent reads).
- Replies are `sendMessage` to the chat, split at 4,096 characters, each piece's Markdown
  sent as Telegram HTML (`telegram_format`: only `<`, `>`, `&` need escaping, so model output
  cannot make the API refuse it; should it refuse the entities anyway, the piece goes again as
  plain text). In a group, a reply is threaded to the message it answers (`reply_parameters`,
  the message id kept in the stored event's `meta`, so a reply the outbox retries after a
  restart is threaded too). A 429 is waited out for its `retry_after` and the call retried;
  any other failure raises, so the outbox keeps the row and retries it.
- A poll that fails (the Bot API unreachable, a 5xx) is tried again after a jittered doubling
  wait (`Backoff`, `reconnect_min_seconds` .. `reconnect_max_seconds`); the link's state shows
  it, and once a call is answered again the outbox's backlog is delivered (never deaf after an
  outage).
- A photo (its largest size), voice note, audio or document is downloaded (`getFile`, then the
  file URL) and kept (`RuntimeAPI.keep_attachments`); its caption is the message's text. A file
  refused (a `[senses]` limit, the Bot API's 20 MB) is named in the text the agent reads, so the
  agent says so; the caption is still answered. A caption refused (too long, not valid text)
  drops the message before its file is fetched: nothing is kept for it. A file in a group that
  is not addressed to the bot is only named ("[a file shared in the chat: NAME]"): not fetched.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import httpx

from persyn.channels.telegram.config import TelegramConfig
from persyn.channels.telegram.format import telegram_html
from persyn.channels.text import split_message
from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError, InputError
from persyn.core.events import Attachment, Event, Outbound, Speaker, Upload
from persyn.core.ids import derived_id
from persyn.core.messages import without_lone_surrogates
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Backoff, Channel, end_task

__all__ = ["TELEGRAM_SERVICE", "TelegramChannel", "TelegramRefused"]

log = logging.getLogger(__name__)

TELEGRAM_SERVICE = "telegram"
_MESSAGE_LIMIT = 4096
_RETRIES_AFTER_429 = 5
_LAST_DATE = 253_402_300_800  # 10000-01-01: a later Unix date (or message id) is not one
MESSAGE_ID_META = "telegram_message_id"  # the inbound message an event is, for threading
CHAT_TYPE_META = "telegram_chat_type"  # private, group, supergroup, channel


_DOWNLOAD_LIMIT = 20_000_000  # what the Bot API lets a bot download (getFile)


@dataclass(frozen=True)
class TelegramFile:
    """The one file a message carries: a photo (its largest size), a voice note, audio, a document."""

    kind: str
    file_id: str
    media_type: str | None
    filename: str | None
    size: int | None


def _media_of(message: dict[str, Any]) -> TelegramFile | None:
    photo = message.get("photo")
    if isinstance(photo, list) and photo:
        sizes = [cast(dict[str, Any], p) for p in cast(list[object], photo) if isinstance(p, dict)]
        largest = max(
            sizes, key=lambda p: int(p.get("file_size") or 0) or int(p.get("width") or 0), default=None
        )
        if largest is not None and isinstance(largest.get("file_id"), str):
            return TelegramFile("photo", largest["file_id"], None, None, _size(largest))
    for kind in ("voice", "audio", "document"):
        item = message.get(kind)
        if isinstance(item, dict):
            item = cast(dict[str, Any], item)
            if isinstance(item.get("file_id"), str):
                mime, name = item.get("mime_type"), item.get("file_name")
                return TelegramFile(
                    kind,
                    item["file_id"],
                    mime if isinstance(mime, str) else None,
                    name if isinstance(name, str) else None,
                    _size(item),
                )
    return None


def _size(item: dict[str, Any]) -> int | None:
    size = item.get("file_size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


class TelegramRefused(ChannelError):
    """The Bot API answered a call with an error (not a rate limit)."""

    def __init__(self, method: str, code: object, description: object) -> None:
        super().__init__(f"telegram {method}: {code} {description!r}")
        self.code = code
        self.description = str(description or "")


class TelegramChannel(Channel):
    """The `telegram` service: one agent answering as the bot of `token`."""

    service = TELEGRAM_SERVICE

    def __init__(
        self,
        config: TelegramConfig,
        agent: AgentConfig,
        api: RuntimeAPI,
        *,
        token: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not token:
            raise ChannelError("[channels.telegram] is enabled but TELEGRAM_BOT_TOKEN is not set")
        self.config = config
        self.agent = agent
        self._api = api
        self._base = f"{config.api_url}/bot{token}"
        self._files = f"{config.api_url}/file/bot{token}"
        self._client = httpx.AsyncClient(timeout=config.poll_seconds + 15, transport=transport)
        self._offset: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.username: str | None = None
        self.bot_id: int | None = None
        self.ready = asyncio.Event()
        self.link = self.track(agent.name, api.clock.now)

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._api.attach_channel(self)
        self._task = asyncio.ensure_future(self._poll_forever())

    async def stop(self) -> None:
        self._api.detach_channel(self)
        await end_task(self._task)
        await self._client.aclose()

    async def _poll_forever(self) -> None:
        backoff = Backoff(self.config.reconnect_min_seconds, self.config.reconnect_max_seconds)
        down = True  # not yet reached: what waits in the outbox goes out once it is
        while True:
            try:
                if down:  # first, or after a failure: who the bot is, which says the API is back
                    me = await self._call("getMe", {})
                    self.bot_id, self.username = int(me["id"]), str(me.get("username") or "")
                    self.ready.set()
                    self.link.up()
                    down = False
                    await self._api.deliver_pending(TELEGRAM_SERVICE)
                await self._poll_once()
                self.link.up()  # a poll answered
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("telegram: %s", exc)
                self.link.lost(exc)
                down = True
                await asyncio.sleep(backoff.next())

    async def _poll_once(self) -> None:
        body: dict[str, Any] = {"timeout": self.config.poll_seconds, "allowed_updates": ["message"]}
        if self._offset is not None:
            body["offset"] = self._offset
        for update in await self._call("getUpdates", body):
            update_id = update.get("update_id") if isinstance(update, dict) else None
            if not isinstance(update_id, int) or isinstance(update_id, bool):
                log.warning("telegram: skipped an update without an integer update_id: %.200r", update)
                continue
            await self._received(update)
            self._offset = update_id + 1

    async def _call(self, method: str, body: dict[str, Any]) -> Any:
        """One Bot API call; a 429 is waited out (`retry_after`) and retried."""
        for _ in range(_RETRIES_AFTER_429):
            response = await self._client.post(f"{self._base}/{method}", json=body)
            try:
                data = response.json()
            except ValueError as exc:
                raise ChannelError(f"telegram {method}: HTTP {response.status_code}, not JSON") from exc
            if data.get("ok"):
                return data.get("result")
            parameters = data.get("parameters") or {}
            if data.get("error_code") == 429 and "retry_after" in parameters:
                wait = float(parameters["retry_after"])
                log.info("telegram %s: rate limited, retrying after %gs", method, wait)
                await asyncio.sleep(wait)
                continue
            raise TelegramRefused(method, data.get("error_code"), data.get("description"))
        raise ChannelError(f"telegram {method}: still rate limited after {_RETRIES_AFTER_429} tries")

    # the channel port ----------------------------------------------------------------------
    def serves(self, agent_id: str) -> bool:
        return agent_id == self.agent.id

    async def direct_channel(self, agent_id: str, speaker_id: str) -> str:
        """A Telegram user's private chat with the bot has their user id as its `chat_id`, but a
        bot may write there only once they have started it (or not blocked it since). A
        `sendChatAction` (core.telegram.org/bots/api#sendchataction) asks before anything is
        stored: its 403 is the clear refusal, not a message held in the outbox forever."""
        if agent_id != self.agent.id:
            raise ChannelError(f"agent {agent_id!r} is not the Telegram bot here")
        if not re.fullmatch(r"[0-9]{1,20}", speaker_id):
            raise ChannelError(f"{speaker_id!r} is not a Telegram user id")
        try:
            await self._call("sendChatAction", {"chat_id": speaker_id, "action": "typing"})
        except TelegramRefused as refused:
            if refused.code == 403:
                raise ChannelError(
                    f"Telegram refuses: {refused.description} (a bot can write only to people "
                    "who have started a chat with it)"
                ) from refused
            raise
        return speaker_id

    async def deliver(self, outbound: Outbound) -> None:
        if outbound.agent_id != self.agent.id:
            raise ChannelError(f"agent {outbound.agent_id!r} is not the Telegram bot here")
        thread = await self._thread(outbound)
        for piece in split_message(outbound.text, _MESSAGE_LIMIT):
            body: dict[str, Any] = {"chat_id": outbound.channel, "text": telegram_html(piece) or piece}
            if thread is not None:  # the first piece answers the message; the rest follow it
                body["reply_parameters"] = {"message_id": thread, "allow_sending_without_reply": True}
                thread = None
            try:
                await self._call("sendMessage", {**body, "parse_mode": "HTML"})
            except TelegramRefused as refused:
                if refused.code != 400 or "entities" not in refused.description:
                    raise
                log.warning("telegram: formatting refused (%s); sent as plain text", refused.description)
                await self._call("sendMessage", {**body, "text": piece})

    async def _thread(self, outbound: Outbound) -> int | None:
        """The message a reply in a group answers (None: a private chat, a redirected reply,
        or a message the agent started)."""
        event = await self._api.get_event(outbound.agent_id, outbound.event_id)
        if event is None or event.service != TELEGRAM_SERVICE or event.channel != outbound.channel:
            return None
        if event.meta.get(CHAT_TYPE_META, "private") == "private":
            return None
        raw = event.meta.get(MESSAGE_ID_META, "")
        return int(raw) if raw.isdigit() else None

    # inbound -----------------------------------------------------------------------------
    async def _kept(
        self, media: TelegramFile, chat_id: str, sender_id: str
    ) -> tuple[tuple[Attachment, ...], str]:
        """The file downloaded (`getFile`, then the file URL; at most the Bot API's 20 MB)
        and kept, or why it was not."""
        try:
            if media.size is not None and media.size > _DOWNLOAD_LIMIT:
                raise InputError(
                    f"the file is {media.size} bytes; bots can download at most {_DOWNLOAD_LIMIT}"
                )
            found = await self._call("getFile", {"file_id": media.file_id})
            path = found.get("file_path") if isinstance(found, dict) else None
            if not isinstance(path, str) or not path or ".." in path:
                raise ChannelError(f"telegram getFile: no usable file_path in {found!r:.200}")
            data = await self._download(f"{self._files}/{path}")
            upload = Upload(data=data, declared_type=media.media_type, filename=media.filename)
            kept = await self._api.keep_attachments(
                self.agent.id, TELEGRAM_SERVICE, chat_id, sender_id, [upload]
            )
        except (InputError, ChannelError, httpx.HTTPError) as exc:
            log.warning("telegram: a %s in chat %s was not kept: %s", media.kind, chat_id, exc)
            return (), f"{media.filename or media.kind}: {exc}"
        return kept, ""

    async def _download(self, url: str) -> bytes:
        async with self._client.stream("GET", url) as response:
            if response.status_code != 200:
                raise ChannelError(f"telegram file download: HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > _DOWNLOAD_LIMIT:
                    raise InputError(f"the file is over the {_DOWNLOAD_LIMIT}-byte download limit")
        return bytes(body)

    def _addressed(self, message: dict[str, Any]) -> bool:
        chat = message.get("chat") or {}
        if chat.get("type") == "private":
            return True
        replied = (message.get("reply_to_message") or {}).get("from") or {}
        if self.bot_id is not None and replied.get("id") == self.bot_id:
            return True
        text = str(message.get("text") or message.get("caption") or "")
        return bool(self.username) and re.search(rf"@{re.escape(self.username)}\b", text, re.I) is not None

    async def _received(self, update: dict[str, Any]) -> None:
        message = update.get("message") or {}
        if not isinstance(message, dict):
            log.warning("telegram: skipped update %r: its message is not an object", update["update_id"])
            return
        message = cast(dict[str, Any], message)
        text = message.get("text")
        if text is None:  # a photo, voice note or document says its words in `caption`
            text = message.get("caption") if _media_of(message) else None
            text = text if isinstance(text, str) else ("" if _media_of(message) else None)
        sender = message.get("from") or {}
        chat = message.get("chat") or {}
        if (
            not isinstance(text, str)
            or not (text.strip() or _media_of(message))
            or not isinstance(sender, dict)
        ):
            return  # stickers, joins: nothing said or shown to answer
        if not isinstance(chat, dict):
            log.warning("telegram: skipped update %r: its chat is not an object", update["update_id"])
            return
        sender, chat = cast(dict[str, Any], sender), cast(dict[str, Any], chat)
        # A malformed update is skipped, never retried: the poll must move past it (a poison
        # update would otherwise be fetched again for ever and stop every later message).
        for field, value in (("from.id", sender.get("id")), ("chat.id", chat.get("id"))):
            if not isinstance(value, int) or isinstance(value, bool):
                if value is not None:
                    log.warning("telegram: skipped update %r: %s is %.80r", update["update_id"], field, value)
                return
        for field in ("message_id", "date"):
            value = message.get(field)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _LAST_DATE:
                log.warning("telegram: skipped update %r: %s is %.80r", update["update_id"], field, value)
                return
        if self.bot_id is not None and sender.get("id") == self.bot_id:
            return
        said_at = datetime.fromtimestamp(message["date"], UTC)
        now = self._api.clock.now()
        # JSON may carry a lone "\ud800": replaced like undecodable bytes, never the message lost
        name = without_lone_surrogates(
            str(sender.get("username") or sender.get("first_name") or sender["id"])
        )
        text = without_lone_surrogates(text)
        event_id = derived_id(said_at, TELEGRAM_SERVICE, str(chat["id"]), str(message.get("message_id")))
        attachments: tuple[Attachment, ...] = ()
        media = _media_of(message)
        if media is not None and await self._api.get_event(self.agent.id, event_id) is not None:
            # Telegram delivers an update again when the offset was not confirmed (a restart
            # mid-batch): the event is stored, its file kept; downloading it again would keep a
            # second copy that nothing refers to, counted against the storage cap.
            log.info(
                "telegram: update %r was received already; its file is not fetched again", update["update_id"]
            )
            return
        if media is not None and text.strip():
            # The caption is checked before its file is fetched and kept: a message refused
            # for its text must leave no file behind (nothing would refer to it).
            try:
                self._api.validate_text(text)
            except InputError as exc:
                log.warning("telegram: dropped a message in chat %s: %s", chat["id"], exc)
                return
        addressed = self._addressed(message)
        if media is not None and not addressed:  # overheard in a group: named, never fetched or read
            text = f"[a file shared in the chat: {media.filename or media.kind}] {text}".strip()
        elif media is not None:
            attachments, refused = await self._kept(media, str(chat["id"]), str(sender["id"]))
            if refused:  # the agent reads why, and says so in the chat
                text = f"[a file I refused: {refused}] {text}".strip()
        event = Event(
            id=event_id,
            agent_id=self.agent.id,
            service=TELEGRAM_SERVICE,
            channel=str(chat["id"]),
            speaker=Speaker(
                service=TELEGRAM_SERVICE,
                channel=TELEGRAM_SERVICE,
                speaker_id=str(sender["id"]),
                display_name=name,
                kind="agent" if sender.get("is_bot") else "human",
            ),
            text=text,
            received_at=min(said_at, now) if said_at.year > 2000 else now,
            addressed=addressed,
            attachments=attachments,
            meta={
                MESSAGE_ID_META: str(message.get("message_id")),
                CHAT_TYPE_META: str(chat.get("type") or "private"),
            },
        )
        try:
            if text.strip() or not attachments:  # a photo alone is said by its attachment
                self._api.validate_text(text)
            await self._api.submit(event)
        except InputError as exc:
            log.warning("telegram: dropped a message in chat %s: %s", chat["id"], exc)
