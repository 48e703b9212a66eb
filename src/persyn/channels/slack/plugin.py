"""Slack's registration (`channels/registry.py`): connected when `[channels.slack] enabled`;
with `mode = "events"` the web server also mounts `POST /slack/events` (`events.py`).
`persyn doctor` asks `auth.test` whose the bot token is (and, in Socket Mode, whether the
app-level token may open a connection — `apps.connections.open` issues a URL, opens nothing).
The adapter is imported only when connected: slack-sdk and aiohttp take a while to import."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
from starlette.routing import BaseRoute

from persyn.channels.registry import PROBE_SECONDS, RETRYING, ChannelPlugin, Probe, revealed, served_agent
from persyn.channels.slack.config import SlackConfig
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ConfigError
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel, NetworkChannel

__all__ = ["PLUGIN", "SLACK_SERVICE"]

SLACK_SERVICE = "slack"  # `inbound.py`'s, named here so as not to import the SDK


def _agent(settings: Settings, config: SlackConfig) -> AgentConfig:
    return served_agent(settings, config.agent)


def download_limit(settings: Settings) -> int:
    """The largest file the senses take: a larger one is refused before it is downloaded."""
    senses = settings.senses
    return max(senses.image_max_bytes, senses.audio_max_bytes, senses.document_max_bytes)


def _tokens(settings: Settings, config: SlackConfig) -> tuple[str, str | None]:
    bot = revealed(settings.secrets.channel("slack_bot_token"))
    if bot is None:
        raise ConfigError("[channels.slack] enabled = true needs the bot token (xoxb-) in SLACK_BOT_TOKEN")
    app = revealed(settings.secrets.channel("slack_app_token"))
    if config.mode == "socket" and app is None:
        raise ConfigError(
            '[channels.slack] mode = "socket" needs the app-level token (xapp-) in SLACK_APP_TOKEN'
        )
    return bot, app


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    config = settings.channels.section(SlackConfig)
    bot, app = _tokens(settings, config)

    def build() -> NetworkChannel:
        from persyn.channels.slack.channel import SlackChannel

        return SlackChannel(
            config,
            _agent(settings, config),
            api,
            bot_token=bot,
            app_token=app,
            download_limit=download_limit(settings),
        )

    return LeasedChannel(SLACK_SERVICE, build)


def _web_routes(settings: Settings, api: RuntimeAPI) -> Sequence[BaseRoute]:
    config = settings.channels.section(SlackConfig)
    if config.mode != "events":
        return []
    from persyn.channels.slack.events import events_route, inbound_for

    bot = revealed(settings.secrets.channel("slack_bot_token"))
    secret = revealed(settings.secrets.channel("slack_signing_secret"))
    if bot is None or secret is None:
        raise ConfigError('[channels.slack] mode = "events" needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET')
    inbound = inbound_for(
        config, _agent(settings, config), api, bot_token=bot, download_limit=download_limit(settings)
    )
    return events_route(
        inbound,
        secret,
        max_body_bytes=settings.web.max_body_bytes,
        timeout_seconds=settings.web.request_timeout_seconds,
    )


async def _call(client: httpx.AsyncClient, url: str, token: str) -> dict[str, object]:
    response = await client.post(url, headers={"Authorization": f"Bearer {token}"})
    data = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    return data if isinstance(data, dict) else {}


async def _probe(settings: Settings) -> Probe:
    config = settings.channels.section(SlackConfig)
    bot = revealed(settings.secrets.channel("slack_bot_token"))
    if bot is None:
        return Probe(
            "slack", False, "enabled but SLACK_BOT_TOKEN is not set", "export SLACK_BOT_TOKEN=xoxb-..."
        )
    app = revealed(settings.secrets.channel("slack_app_token"))
    if config.mode == "socket" and app is None:
        return Probe(
            "slack",
            False,
            'mode = "socket" but SLACK_APP_TOKEN is not set',
            "export SLACK_APP_TOKEN=xapp-...",
        )
    if config.mode == "events" and settings.secrets.channel("slack_signing_secret") is None:
        return Probe(
            "slack",
            False,
            'mode = "events" but SLACK_SIGNING_SECRET is not set',
            "export SLACK_SIGNING_SECRET=...",
        )
    try:
        async with httpx.AsyncClient(timeout=PROBE_SECONDS) as client:
            me = await _call(client, f"{config.api_url}auth.test", bot)
            if me.get("ok") and config.mode == "socket" and app is not None:
                opened = await _call(client, f"{config.api_url}apps.connections.open", app)
                if not opened.get("ok"):
                    detail = f"the app-level token was refused: {opened.get('error') or 'no answer'}"
                    return Probe("slack", False, detail, "check SLACK_APP_TOKEN (connections:write scope)")
    except (httpx.HTTPError, ValueError) as exc:
        detail = f"{config.api_url} does not answer ({type(exc).__name__})"
        return Probe("slack", False, detail, f"check [channels.slack] api_url; {RETRYING}")
    if not me.get("ok"):
        detail = f"the bot token was refused: {me.get('error') or 'no answer'}"
        return Probe("slack", False, detail, "check SLACK_BOT_TOKEN (the app's Bot User OAuth Token)")
    return Probe(
        "slack", True, f"{config.api_url}: the bot @{me.get('user') or '?'} in {me.get('team') or '?'}"
    )


PLUGIN = ChannelPlugin(
    SLACK_SERVICE,
    rank=3,
    configured=lambda settings: settings.channels.section(SlackConfig).enabled,
    connect=_connect,
    probe=_probe,
    section="[channels.slack]",
    web_routes=_web_routes,
)
