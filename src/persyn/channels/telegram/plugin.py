"""Telegram's registration (`channels/registry.py`): connected when `[channels.telegram]
enabled`; `persyn doctor` asks the Bot API who the token's bot is."""

from __future__ import annotations

from functools import partial

import httpx

from persyn.channels.registry import PROBE_SECONDS, RETRYING, ChannelPlugin, Probe, revealed, served_agent
from persyn.channels.telegram.channel import TELEGRAM_SERVICE, TelegramChannel
from persyn.channels.telegram.config import TelegramConfig
from persyn.core.config import Settings
from persyn.core.errors import ConfigError
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = ["PLUGIN"]


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    telegram = settings.channels.section(TelegramConfig)
    token = revealed(settings.secrets.channel("telegram_bot_token"))
    if token is None:
        raise ConfigError("[channels.telegram] enabled = true needs the bot token in TELEGRAM_BOT_TOKEN")
    agent = served_agent(settings, telegram.agent)
    return LeasedChannel(TELEGRAM_SERVICE, partial(TelegramChannel, telegram, agent, api, token=token))


async def _probe(settings: Settings) -> Probe:
    config = settings.channels.section(TelegramConfig)
    token = settings.secrets.channel("telegram_bot_token")
    if token is None:
        return Probe(
            "telegram", False, "enabled but TELEGRAM_BOT_TOKEN is not set", "export TELEGRAM_BOT_TOKEN=..."
        )
    try:
        async with httpx.AsyncClient(timeout=PROBE_SECONDS) as client:
            response = await client.get(f"{config.api_url}/bot{token.get_secret_value()}/getMe")
        data = (
            response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        )
    except (httpx.HTTPError, ValueError) as exc:
        detail = f"{config.api_url} does not answer ({type(exc).__name__})"
        return Probe("telegram", False, detail, f"check [channels.telegram] api_url; {RETRYING}")
    if not isinstance(data, dict) or not data.get("ok"):
        detail = f"{config.api_url} refused the bot token (HTTP {response.status_code})"
        return Probe("telegram", False, detail, "check TELEGRAM_BOT_TOKEN (from @BotFather)")
    name = (data.get("result") or {}).get("username") or "?"
    return Probe("telegram", True, f"{config.api_url}: the bot @{name}")


PLUGIN = ChannelPlugin(
    TELEGRAM_SERVICE,
    rank=2,
    configured=lambda settings: settings.channels.section(TelegramConfig).enabled,
    connect=_connect,
    probe=_probe,
    section="[channels.telegram]",
)
