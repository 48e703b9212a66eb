"""What Slack sends, made into the runtime's events: one `SlackInbound` per agent, used by the
Socket Mode connection (`channel.py`) and by the Events API route on the web server (`events.py`)
alike, so both ways of receiving behave the same.

- A message event (api.slack.com/events/message) in a DM (`channel_type` `im`) is addressed to
  the agent; in a channel, group or group DM it is when it mentions the bot user (`<@U…>`).
- The channel is Slack's conversation id (`C…`, `G…`, `D…`): each DM and each channel is its
  own compartment (`memory/access.py`), so what was said in `#finance` does not surface in a
  DM with someone else. The thread a message is in (or that it starts) is kept in the event's
  `meta`, and the reply goes into it.
- The sender is one contact per Slack user, speaker id `<team>/<user>` (the directory's
  `slack:<team>/<user>`); `users.info` names them, cached per user. The agent's own messages
  (its user id or bot id, learned by `auth.test`) are skipped; another bot's (`bot_id`,
  `subtype: bot_message`) are heard as an agent's, so agent-to-agent pacing applies.
- The event id derives from the conversation and the message's `ts`: Slack's redeliveries
  (an envelope not acknowledged, `X-Slack-Retry-Num`), and a `message` and an `app_mention`
  for the same message, are the same event, and the store answers it once.
- An edit (`message_changed`) is heard as a new message "(edited) …" with its own id (the
  edit's `ts`); a deletion (`message_deleted`) is logged and nothing is answered.
- Files (`files`, api.slack.com/types/file) addressed to the agent are downloaded from
  `url_private` with the bot token, at most the largest `[senses]` limit (a larger declared
  `size` is refused before any download), and kept (`RuntimeAPI.keep_attachments`); a file
  refused is named in the text the agent reads, and the words are still answered.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, cast

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError, InputError
from persyn.core.events import Attachment, Event, Speaker, Upload
from persyn.core.ids import derived_id
from persyn.core.messages import without_lone_surrogates
from persyn.runtime.api import RuntimeAPI

__all__ = ["CHANNEL_TYPE_META", "SLACK_SERVICE", "THREAD_META", "SlackInbound"]

log = logging.getLogger(__name__)

SLACK_SERVICE = "slack"
THREAD_META = "slack_thread_ts"  # the thread a reply goes into
CHANNEL_TYPE_META = "slack_channel_type"  # im, mpim, channel, group
_NAMES_KEPT = 4096
_TS = re.compile(r"^\d{1,12}\.\d{1,9}$")


class SlackInbound:
    """Turns Slack event payloads (`event_callback`) into submitted events for `agent`."""

    def __init__(
        self, web: AsyncWebClient, agent: AgentConfig, api: RuntimeAPI, *, download_limit: int
    ) -> None:
        self.web, self.agent, self._api = web, agent, api
        self.download_limit = download_limit
        self.team: str | None = None
        self.user_id: str | None = None
        self.bot_id: str | None = None
        self._names: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._tails: dict[str, asyncio.Task[None]] = {}  # per conversation: its latest handling

    def handle(self, payload: dict[str, Any]) -> asyncio.Task[None]:
        """`received` in the background (the delivery is acknowledged first), in order within a
        conversation: a message waits for the one before it in its channel, so a burst is
        stored as it was said even when a name lookup or a download takes a while."""
        event = payload.get("event")
        key = str(cast(dict[str, Any], event).get("channel")) if isinstance(event, dict) else ""
        before = self._tails.get(key)
        task = asyncio.ensure_future(self._after(before, payload))
        self._tails[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tails.get(key) is done:
                del self._tails[key]

        task.add_done_callback(forget)
        return task

    async def _after(self, before: asyncio.Task[None] | None, payload: dict[str, Any]) -> None:
        if before is not None:
            await asyncio.wait([before])
        await self.received(payload)

    async def identify(self) -> None:
        """`auth.test`: the workspace, and the bot's own user and bot ids."""
        me = await self.web.auth_test()
        self.team, self.user_id = str(me["team_id"]), str(me["user_id"])
        self.bot_id = str(me.get("bot_id") or "") or None

    async def received(self, payload: dict[str, Any]) -> None:
        """One `event_callback` payload; anything malformed is logged and skipped (never raised:
        a poison event must not stop the ones after it)."""
        try:
            if self.user_id is None:
                await self.identify()
            event = payload.get("event")
            if payload.get("type") != "event_callback" or not isinstance(event, dict):
                log.info("slack: ignored a payload of type %.40r", payload.get("type"))
                return
            await self._event(cast(dict[str, Any], event), str(payload.get("team_id") or self.team))
        except (SlackApiError, aiohttp.ClientError, ChannelError, TimeoutError) as exc:
            log.warning("slack: an event could not be handled: %s", exc)

    async def _event(self, event: dict[str, Any], team: str) -> None:
        kind, subtype = event.get("type"), event.get("subtype")
        if kind not in ("message", "app_mention"):
            return
        if subtype == "message_deleted":
            log.info("slack: message %.40s deleted in %.40s", event.get("deleted_ts"), event.get("channel"))
            return
        edited = subtype == "message_changed"
        message = cast(dict[str, Any], event.get("message")) if edited else event
        if not isinstance(message, dict):
            log.warning("slack: skipped a message_changed event without its message")
            return
        channel, ts = event.get("channel"), event.get("ts")
        user, text = message.get("user"), message.get("text", "")
        if not (isinstance(channel, str) and channel and isinstance(ts, str) and _TS.match(ts)):
            log.warning("slack: skipped an event without a usable channel and ts: %.200r", event)
            return
        if not isinstance(text, str):
            log.warning("slack: skipped a message in %s whose text is not a string", channel)
            return
        bot_id = message.get("bot_id")
        if user == self.user_id or (bot_id is not None and bot_id == self.bot_id):
            return  # the agent's own
        if subtype not in (None, "bot_message", "message_changed", "file_share", "thread_broadcast"):
            return  # joins, topic changes: nothing said to answer
        speaker_id = user if isinstance(user, str) and user else bot_id
        if not isinstance(speaker_id, str) or not speaker_id:
            log.warning("slack: skipped a message in %s with neither user nor bot_id", channel)
            return
        files = [cast(dict[str, Any], f) for f in message.get("files") or [] if isinstance(f, dict)]
        if not text.strip() and not files:
            return
        said_at = datetime.fromtimestamp(float(ts), UTC)
        event_id = derived_id(said_at, SLACK_SERVICE, channel, ts)
        if await self._api.get_event(self.agent.id, event_id) is not None:
            log.info("slack: message %s in %s was received already", ts, channel)
            return
        name, is_bot = await self._name(speaker_id, message)
        channel_type = str(event.get("channel_type") or ("im" if channel.startswith("D") else "channel"))
        mention = f"<@{self.user_id}>"
        addressed = channel_type == "im" or kind == "app_mention" or mention in text
        text = without_lone_surrogates(text).replace(mention, f"@{self.agent.name}")
        if edited:
            text = f"(edited) {text}"
        try:
            if text.strip():
                self._api.validate_text(text)
        except InputError as exc:
            log.warning("slack: dropped a message in %s: %s", channel, exc)
            return
        attachments: tuple[Attachment, ...] = ()
        if files and not addressed:
            text = " ".join(
                [*(f"[a file shared in the channel: {f.get('name')}]" for f in files), text]
            ).strip()
        elif files:
            attachments, refused = await self._kept(files, channel, f"{team}/{speaker_id}")
            if refused:
                text = f"[a file I refused: {refused}] {text}".strip()
        thread = message.get("thread_ts") or event.get("thread_ts")
        if not isinstance(thread, str) and channel_type != "im":
            thread = ts  # a reply in a channel starts a thread on the message
        now = self._api.clock.now()
        submitted = Event(
            id=event_id,
            agent_id=self.agent.id,
            service=SLACK_SERVICE,
            channel=channel,
            speaker=Speaker(
                service=SLACK_SERVICE,
                channel=SLACK_SERVICE,
                speaker_id=f"{team}/{speaker_id}",
                display_name=name,
                kind="agent" if is_bot or bot_id is not None or subtype == "bot_message" else "human",
            ),
            text=text,
            received_at=min(said_at, now),
            addressed=addressed,
            attachments=attachments,
            meta={THREAD_META: thread if isinstance(thread, str) else "", CHANNEL_TYPE_META: channel_type},
        )
        try:
            await self._api.submit(submitted)
        except InputError as exc:
            log.warning("slack: dropped a message in %s: %s", channel, exc)

    async def _name(self, speaker_id: str, message: dict[str, Any]) -> tuple[str, bool]:
        """A user's display name and whether it is a bot (`users.info`, cached)."""
        if speaker_id in self._names:
            self._names.move_to_end(speaker_id)
            return self._names[speaker_id]
        found: tuple[str, bool]
        if speaker_id.startswith("B"):  # a bot without a user: its username, if it gave one
            found = (str(message.get("username") or speaker_id), True)
        else:
            try:
                user = (await self.web.users_info(user=speaker_id))["user"]
            except SlackApiError as exc:
                log.info("slack: users.info %s: %s", speaker_id, exc.response.get("error"))
                return speaker_id, False  # not cached: asked again next time
            user = cast(dict[str, Any], user or {})
            profile = cast(dict[str, Any], user.get("profile") or {})
            shown = profile.get("display_name") or user.get("real_name") or user.get("name") or speaker_id
            found = (without_lone_surrogates(str(shown)), bool(user.get("is_bot")))
        self._names[speaker_id] = found
        if len(self._names) > _NAMES_KEPT:
            self._names.popitem(last=False)
        return found

    async def _kept(
        self, files: list[dict[str, Any]], channel: str, speaker_id: str
    ) -> tuple[tuple[Attachment, ...], str]:
        uploads: list[Upload] = []
        refused: list[str] = []
        for item in files:
            name = str(item.get("name") or item.get("id") or "file")
            try:
                uploads.append(await self._download(item, name))
            except (InputError, ChannelError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("slack: a file in %s was not kept: %s", channel, exc)
                refused.append(f"{name}: {exc}")
        if not uploads:
            return (), "; ".join(refused)
        try:
            kept = await self._api.keep_attachments(
                self.agent.id, SLACK_SERVICE, channel, speaker_id, uploads
            )
        except InputError as exc:
            log.warning("slack: the files in %s were not kept: %s", channel, exc)
            return (), "; ".join([*refused, str(exc)])
        return kept, "; ".join(refused)

    async def _download(self, item: dict[str, Any], name: str) -> Upload:
        size, url = item.get("size"), item.get("url_private")
        if isinstance(size, int) and size > self.download_limit:
            raise InputError(f"the file is {size} bytes; the [senses] limit is {self.download_limit}")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise ChannelError("the file has no url_private to download")
        headers = {"Authorization": f"Bearer {self.web.token}"}
        timeout = aiohttp.ClientTimeout(total=120)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as got,
        ):
            if got.status != 200 or got.content_type == "text/html":
                raise ChannelError(f"the download answered HTTP {got.status} ({got.content_type})")
            body = bytearray()
            async for chunk in got.content.iter_chunked(65536):
                body += chunk
                if len(body) > self.download_limit:
                    raise InputError(f"the file is over the [senses] limit of {self.download_limit} bytes")
        mimetype = item.get("mimetype")
        return Upload(
            data=bytes(body), declared_type=mimetype if isinstance(mimetype, str) else None, filename=name
        )
