"""The Slack adapter (SPEC §3, team chat): one agent as a Slack app's bot user, on the official
`slack-sdk` async clients (`AsyncWebClient` with `[channels.slack] api_url` as its base URL;
Socket Mode's aiohttp client).

- `mode = "socket"`: `apps.connections.open` with the app-level token, then the WebSocket;
  each `events_api` envelope is acknowledged (`envelope_id`) once its event is stored
  (`inbound.py`), or after 2 s if storing takes longer (Slack's limit is 3 s); Slack sends an
  envelope not acknowledged again, and the same message is the same event, answered once. The SDK's own reconnection is off: this adapter's connect loop owns it, with
  the shared jittered `Backoff`, and tells its `LinkTracker` (`persyn channels show`, doctor,
  the web page) — a server gone mid-run is retried until it is back, never left deaf.
- `mode = "events"`: events arrive on the web server (`events.py`, `POST /slack/events`); this
  channel only learns who it is (`auth.test`) and delivers.
- A message the agent starts to someone known only by their Slack identity goes to their DM,
  opened by `conversations.open` (`direct_channel`, api.slack.com/methods/conversations.open).
- Replies are `chat.postMessage` in the thread the message came from (`thread_ts`), split at
  4,000 characters (Slack truncates longer text; 40,000 is refused). A 429 is waited out for its
  `Retry-After` (the SDK's rate-limit retry handler) and the call retried; any other failure
  raises, so the outbox keeps the row and retries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any, cast

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from persyn.channels.slack.config import SlackConfig
from persyn.channels.slack.inbound import SLACK_SERVICE, THREAD_META, SlackInbound
from persyn.channels.text import split_message
from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError
from persyn.core.events import Outbound
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Backoff, Channel, end_task

__all__ = ["MESSAGE_LIMIT", "SlackChannel", "web_client"]

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 4000
_RATE_LIMIT_RETRIES = 5
_CONNECT_SECONDS = 15.0
_WATCH_SECONDS = 0.5  # how often a live Socket Mode connection is checked
_ACK_SECONDS = 2.0  # the longest an envelope waits for its event to be stored (Slack allows 3 s)
_USER = re.compile(
    r"[UW][A-Z0-9]{1,20}"
)  # a user id (api.slack.com/changelog/2016-08-11-user-id-format-changes)


def web_client(config: SlackConfig, token: str) -> AsyncWebClient:
    """The Web API client: Slack's (or a test double's) base URL, 429s waited out."""
    return AsyncWebClient(
        token=token,
        base_url=config.api_url,
        timeout=30,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=_RATE_LIMIT_RETRIES)],
    )


class SlackChannel(Channel):
    """The `slack` service: one agent answering as the bot user of `bot_token`."""

    service = SLACK_SERVICE

    def __init__(
        self,
        config: SlackConfig,
        agent: AgentConfig,
        api: RuntimeAPI,
        *,
        bot_token: str,
        app_token: str | None = None,
        download_limit: int = 25_000_000,
        backoff: Backoff | None = None,
    ) -> None:
        if not bot_token:
            raise ChannelError("[channels.slack] is enabled but SLACK_BOT_TOKEN is not set")
        if config.mode == "socket" and not app_token:
            raise ChannelError(
                '[channels.slack] mode = "socket" needs the app-level token in SLACK_APP_TOKEN'
            )
        self.config, self.agent, self._api = config, agent, api
        self._app_token = app_token
        self.web = web_client(config, bot_token)
        self.inbound = SlackInbound(self.web, agent, api, download_limit=download_limit)
        self._backoff = backoff or Backoff(0.5, 30.0)
        self._task: asyncio.Task[None] | None = None
        self._socket: SocketModeClient | None = None
        self._handling: set[asyncio.Task[None]] = set()
        self.ready = asyncio.Event()
        self.link = self.track(agent.name, api.clock.now)

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._api.attach_channel(self)
        self._task = asyncio.ensure_future(self._run_forever())

    async def stop(self) -> None:
        self._api.detach_channel(self)
        await end_task(self._task)
        await self._close_socket()
        for task in list(self._handling):
            task.cancel()
        await asyncio.gather(*self._handling, return_exceptions=True)

    async def _run_forever(self) -> None:
        while True:
            try:
                await self.inbound.identify()
                if self.config.mode == "socket":
                    await self._connect()
                self.link.up()
                self._backoff.reset()
                self.ready.set()
                await self._api.deliver_pending(SLACK_SERVICE)
                if self.config.mode == "socket":
                    await self._until_lost()
                    raise ChannelError("the Socket Mode connection closed")
                return  # events mode: the web server receives; nothing to hold open
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                detail = exc.response.get("error") if isinstance(exc, SlackApiError) else exc
                log.warning("slack: %s", detail)
                self.link.lost(str(detail) or type(exc).__name__)
                await self._close_socket()
                await asyncio.sleep(self._backoff.next())

    async def _connect(self) -> None:
        client = SocketModeClient(
            app_token=self._app_token or "",
            web_client=AsyncWebClient(base_url=self.config.api_url, timeout=30),
            auto_reconnect_enabled=False,
            ping_interval=5,
        )
        client.socket_mode_request_listeners.append(self._request)
        self._socket = client
        # `connect` retries without end on its own; the URL is asked for first (a refused token
        # or a server gone raises here), and the WebSocket given a bounded time.
        client.wss_uri = await client.issue_new_wss_url()
        await asyncio.wait_for(client.connect(), _CONNECT_SECONDS)

    async def _until_lost(self) -> None:
        # The SDK has no "closed" event with its own reconnection off: its state is polled.
        while self._socket is not None and await self._socket.is_connected():  # noqa: ASYNC110
            await asyncio.sleep(_WATCH_SECONDS)

    async def _close_socket(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            with contextlib.suppress(Exception):
                await socket.close()

    async def _request(self, client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        """Acknowledge the envelope once its event is stored: a process stopped in between has
        not acknowledged it, so Slack sends it again and nothing is lost (the event id derives
        from the message: the redelivery is answered once). Slack wants the acknowledgement
        within 3 s, so a handling that takes longer (a slow `users.info`, a large file) is
        acknowledged after `_ACK_SECONDS` and goes on. (The SDK runs each envelope's listeners
        in a task of its own: one waiting here holds up no other.)"""
        if request.type == "events_api":
            task = self.inbound.handle(request.payload)
            self._handling.add(task)
            task.add_done_callback(self._handling.discard)
            await asyncio.wait([task], timeout=_ACK_SECONDS)
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    # the channel port ----------------------------------------------------------------------
    def serves(self, agent_id: str) -> bool:
        return agent_id == self.agent.id

    async def direct_channel(self, agent_id: str, speaker_id: str) -> str:
        """The DM with the Slack user `<team>/<user>`: `conversations.open` with their user id
        answers the IM channel (the same one each time, opened if it was not)."""
        if agent_id != self.agent.id:
            raise ChannelError(f"agent {agent_id!r} is not the Slack bot here")
        team, _, user = speaker_id.rpartition("/")
        if not _USER.fullmatch(user) or not team:
            raise ChannelError(f"{speaker_id!r} is not a Slack user (team/user)")
        if self.inbound.team is None:
            await self.inbound.identify()
        if team != self.inbound.team:
            raise ChannelError(
                f"{speaker_id!r} is in another workspace than this bot's ({self.inbound.team})"
            )
        try:
            opened = await self.web.conversations_open(users=user)
        except SlackApiError as exc:
            raise ChannelError(f"slack conversations.open: {exc.response.get('error')}") from exc
        found = cast(dict[str, Any], opened.get("channel") or {}).get("id")
        if not isinstance(found, str) or not found:
            raise ChannelError("slack conversations.open answered no channel id")
        return found

    async def deliver(self, outbound: Outbound) -> None:
        if outbound.agent_id != self.agent.id:
            raise ChannelError(f"agent {outbound.agent_id!r} is not the Slack bot here")
        thread = await self._thread(outbound)
        for piece in split_message(outbound.text, MESSAGE_LIMIT):
            body: dict[str, Any] = {"channel": outbound.channel, "text": piece}
            if thread:
                body["thread_ts"] = thread
            try:
                await self.web.chat_postMessage(**body)
            except SlackApiError as exc:
                raise ChannelError(f"slack chat.postMessage: {exc.response.get('error')}") from exc

    async def _thread(self, outbound: Outbound) -> str | None:
        event = await self._api.get_event(outbound.agent_id, outbound.event_id)
        if event is None or event.service != SLACK_SERVICE or event.channel != outbound.channel:
            return None
        return event.meta.get(THREAD_META) or None
