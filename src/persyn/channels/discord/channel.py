"""The Discord adapter (SPEC §3, "community chat"): one agent as a bot, over the Gateway v10
(`gateway.py`) and REST (`rest.py`).

Why our own small client over aiohttp and not `discord.py`: discord.py's REST base is a class
attribute of its internal `Route` and its gateway URL comes from its own `GET /gateway/bot`
handling, so pointing it at a local fake means patching its internals, which the tests may not
do; it also brings its own reconnect policy, which the never-deaf rule wants to own. aiohttp is
already a dependency (mautrix) and speaks both WebSocket and HTTP; the gateway and the rate
limits are a few hundred lines, each following Discord's developer documentation.

- Each MESSAGE_CREATE is an event: its channel is the Discord channel id (a guild text channel,
  a thread — a channel of its own in Discord — or a DM channel), so each is its own
  compartment, grouped only by `[memory] channel_groups`. The guild id is kept in `meta`.
- The sender is one contact per Discord user (directory key `discord`, `discord`, user id: the
  identity `discord:<user id>`); `author.bot` marks another bot as an `agent` (agent-to-agent
  pacing applies, as on IRC); the bot's own messages are skipped.
- Addressed: a DM (no `guild_id`), a message mentioning the bot (`<@id>` / `mentions`), or a
  reply to one of its messages (`referenced_message.author`).
- A message the agent starts to someone known only by their Discord identity goes to their DM
  channel, opened by `POST /users/@me/channels` (`direct_channel`).
- Replies are `POST /channels/{id}/messages`, split at 2,000 characters; in a guild, the first
  piece is a reply to the message it answers (`message_reference`, `fail_if_not_exists: false`;
  the message id kept in the event's `meta`, so a reply the outbox retries after a restart is
  threaded too). A failure raises, so the outbox keeps the row and retries it.
- An attachment of a message addressed to the bot is downloaded from its `url` (without the
  token) and kept (`RuntimeAPI.keep_attachments`, the `[senses]` limits); one over
  `DOWNLOAD_LIMIT` by its declared size is never fetched. A refused file is named in the text the
  agent reads; the words are still answered. Overheard attachments are only named.
- A dispatch with a missing or mistyped field is skipped with a log line naming it; the gateway
  goes on (a poison message never stops the next).
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import datetime
from typing import Any, cast

from persyn.channels.discord.config import DiscordConfig
from persyn.channels.discord.gateway import Gateway
from persyn.channels.discord.rest import DiscordRest
from persyn.channels.text import split_message
from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError, InputError
from persyn.core.events import Attachment, Event, Outbound, Speaker, Upload
from persyn.core.ids import derived_id
from persyn.core.messages import without_lone_surrogates
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Backoff, Channel, end_task

__all__ = ["DISCORD_SERVICE", "DOWNLOAD_LIMIT", "DiscordChannel"]

log = logging.getLogger(__name__)

DISCORD_SERVICE = "discord"
MESSAGE_LIMIT = 2000
DOWNLOAD_LIMIT = 25_000_000  # the largest attachment fetched at all; `[senses]` limits apply after
MESSAGE_ID_META = "discord_message_id"
GUILD_META = "discord_guild_id"  # absent: a DM
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")


class DiscordChannel(Channel):
    """The `discord` service: one agent answering as the bot of `token`."""

    service = DISCORD_SERVICE

    def __init__(
        self,
        config: DiscordConfig,
        agent: AgentConfig,
        api: RuntimeAPI,
        *,
        token: str,
        backoff: Backoff | None = None,
    ) -> None:
        if not token:
            raise ChannelError("[channels.discord] is enabled but DISCORD_BOT_TOKEN is not set")
        self.config, self.agent, self._api = config, agent, api
        self.rest = DiscordRest(config.api_url, token)
        self.link = self.track(agent.name, api.clock.now)
        self.gateway = Gateway(
            self.rest, token, self.link, self._dispatched, gateway_url=config.gateway_url, backoff=backoff
        )
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._api.attach_channel(self)
        self._task = asyncio.ensure_future(self.gateway.run())

    async def stop(self) -> None:
        self._api.detach_channel(self)
        await end_task(self._task)
        await self.rest.close()

    async def _dispatched(self, kind: str, data: dict[str, Any]) -> None:
        if kind in ("READY", "RESUMED"):
            self.ready.set()
            await self._api.deliver_pending(DISCORD_SERVICE)
        elif kind == "MESSAGE_CREATE":
            try:
                await self._received(data)
            except InputError as exc:
                log.warning("discord: dropped message %.40r: %s", data.get("id"), exc)

    # the channel port ----------------------------------------------------------------------
    def serves(self, agent_id: str) -> bool:
        return agent_id == self.agent.id

    async def direct_channel(self, agent_id: str, speaker_id: str) -> str:
        """The DM channel with the Discord user `speaker_id`: `POST /users/@me/channels`
        `{recipient_id}` answers it (the same one each time; discord.com/developers/docs/resources/user#create-dm)."""
        if agent_id != self.agent.id:
            raise ChannelError(f"agent {agent_id!r} is not the Discord bot here")
        if not _SNOWFLAKE.fullmatch(speaker_id):
            raise ChannelError(f"{speaker_id!r} is not a Discord user id")
        opened = await self.rest.call(
            "POST", "/users/@me/channels", route="POST /users/@me/channels", body={"recipient_id": speaker_id}
        )
        found = opened.get("id") if isinstance(opened, dict) else None
        if not isinstance(found, str) or not _SNOWFLAKE.fullmatch(found):
            raise ChannelError(f"discord create DM: no channel id in {opened!r:.200}")
        return found

    async def deliver(self, outbound: Outbound) -> None:
        if outbound.agent_id != self.agent.id:
            raise ChannelError(f"agent {outbound.agent_id!r} is not the Discord bot here")
        if not _SNOWFLAKE.fullmatch(outbound.channel):
            raise ChannelError(f"discord: {outbound.channel!r} is not a channel id")
        reference = await self._reference(outbound)
        route = f"POST /channels/{outbound.channel}/messages"
        for piece in split_message(outbound.text, MESSAGE_LIMIT):
            body: dict[str, Any] = {"content": piece, "allowed_mentions": {"parse": ["users"]}}
            if reference is not None:  # the first piece answers the message; the rest follow it
                body["message_reference"] = {"message_id": reference, "fail_if_not_exists": False}
                reference = None
            await self.rest.call("POST", f"/channels/{outbound.channel}/messages", route=route, body=body)

    async def _reference(self, outbound: Outbound) -> str | None:
        """The message a reply in a guild answers (None: a DM, a redirected reply, or a message
        the agent started)."""
        event = await self._api.get_event(outbound.agent_id, outbound.event_id)
        if event is None or event.service != DISCORD_SERVICE or event.channel != outbound.channel:
            return None
        if GUILD_META not in event.meta:
            return None
        return event.meta.get(MESSAGE_ID_META) or None

    # inbound -----------------------------------------------------------------------------
    def _addressed(self, message: dict[str, Any]) -> bool:
        me = self.gateway.user_id
        if message.get("guild_id") is None:
            return True
        if me is None:
            return False
        mentions = message.get("mentions")
        if isinstance(mentions, list) and any(
            isinstance(m, dict) and cast(dict[str, Any], m).get("id") == me
            for m in cast(list[object], mentions)
        ):
            return True
        replied = message.get("referenced_message")
        if isinstance(replied, dict):
            author = cast(dict[str, Any], replied).get("author")
            if isinstance(author, dict) and cast(dict[str, Any], author).get("id") == me:
                return True
        return f"<@{me}>" in str(message.get("content") or "") or f"<@!{me}>" in str(
            message.get("content") or ""
        )

    async def _received(self, message: dict[str, Any]) -> None:
        author = message.get("author")
        problem = _malformed(message, author)
        if problem:
            log.warning("discord: skipped a MESSAGE_CREATE: %s", problem)
            return
        author = cast(dict[str, Any], author)
        if author["id"] == self.gateway.user_id:
            return
        files = [cast(dict[str, Any], a) for a in message.get("attachments") or [] if isinstance(a, dict)]
        text = without_lone_surrogates(message["content"])
        if not text.strip() and not files:
            return  # an embed, a sticker, a join: nothing said or shown to answer
        channel_id, message_id = message["channel_id"], message["id"]
        now = self._api.clock.now()
        said_at = _timestamp(message.get("timestamp")) or now
        event_id = derived_id(said_at, DISCORD_SERVICE, channel_id, message_id)
        if await self._api.get_event(self.agent.id, event_id) is not None:
            log.info("discord: message %s was received already (a replay)", message_id)
            return
        if text.strip():  # checked before any file is fetched: a refused message keeps nothing
            self._api.validate_text(text)
        addressed = self._addressed(message)
        attachments: tuple[Attachment, ...] = ()
        if files and not addressed:
            names = ", ".join(str(f.get("filename") or "a file") for f in files)
            text = f"[a file shared in the channel: {names}] {text}".strip()
        elif files:
            attachments, refused = await self._kept(files, channel_id, author["id"])
            if refused:
                text = f"[a file I refused: {refused}] {text}".strip()
        guild = message.get("guild_id")
        name = without_lone_surrogates(
            str(author.get("global_name") or author.get("username") or author["id"])
        )
        event = Event(
            id=event_id,
            agent_id=self.agent.id,
            service=DISCORD_SERVICE,
            channel=channel_id,
            speaker=Speaker(
                service=DISCORD_SERVICE,
                channel=DISCORD_SERVICE,
                speaker_id=author["id"],
                display_name=name,
                kind="agent" if author.get("bot") is True else "human",
            ),
            text=text,
            received_at=min(said_at, now),
            addressed=addressed,
            attachments=attachments,
            meta={MESSAGE_ID_META: message_id, **({GUILD_META: str(guild)} if guild else {})},
        )
        await self._api.submit(event)

    async def _kept(
        self, files: list[dict[str, Any]], channel_id: str, sender_id: str
    ) -> tuple[tuple[Attachment, ...], str]:
        """The files downloaded and kept, all or none, or why they were not."""
        uploads: list[Upload] = []
        try:
            for item in files:
                name, url, size = item.get("filename"), item.get("url"), item.get("size")
                label = name if isinstance(name, str) else "a file"
                if not isinstance(url, str) or not url.startswith(("https://", "http://")):
                    raise ChannelError(f"{label} has no usable url")
                if isinstance(size, int) and size > DOWNLOAD_LIMIT:
                    raise InputError(f"{label} is {size} bytes; files over {DOWNLOAD_LIMIT} are not fetched")
                data = await self.rest.download(url, DOWNLOAD_LIMIT)
                kind = item.get("content_type")
                uploads.append(
                    Upload(
                        data=data,
                        declared_type=kind if isinstance(kind, str) else None,
                        filename=name if isinstance(name, str) else None,
                    )
                )
            kept = await self._api.keep_attachments(
                self.agent.id, DISCORD_SERVICE, channel_id, sender_id, uploads
            )
        except (InputError, ChannelError, OSError) as exc:
            log.warning("discord: an attachment in channel %s was not kept: %s", channel_id, exc)
            return (), str(exc)
        return kept, ""


def _malformed(message: dict[str, Any], author: object) -> str:
    """What makes a MESSAGE_CREATE unusable ("" if nothing)."""
    for field in ("id", "channel_id"):
        value = message.get(field)
        if not isinstance(value, str) or not _SNOWFLAKE.fullmatch(value):
            return f"{field} is {value!r:.80}"
    if not isinstance(author, dict) or not isinstance(cast(dict[str, Any], author).get("id"), str):
        return f"message {message['id']} has no author id"
    if not _SNOWFLAKE.fullmatch(cast(dict[str, Any], author)["id"]):
        return f"message {message['id']}: author id is {cast(dict[str, Any], author)['id']!r:.80}"
    if not isinstance(message.get("content"), str):
        return f"message {message['id']} has no content (is the MESSAGE_CONTENT intent enabled?)"
    return ""


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
