"""Discord's registration (`channels/registry.py`): connected when `[channels.discord] enabled`;
`persyn doctor` asks the REST API who the token's bot is (`GET /users/@me`) and where its gateway
is (`GET /gateway/bot`)."""

from __future__ import annotations

from functools import partial

import aiohttp

from persyn.channels.discord.channel import DISCORD_SERVICE, DiscordChannel
from persyn.channels.discord.config import DiscordConfig
from persyn.channels.registry import PROBE_SECONDS, RETRYING, ChannelPlugin, Probe, revealed, served_agent
from persyn.core.config import Settings
from persyn.core.errors import ConfigError
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = ["PLUGIN"]


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    discord = settings.channels.section(DiscordConfig)
    token = revealed(settings.secrets.channel("discord_bot_token"))
    if token is None:
        raise ConfigError("[channels.discord] enabled = true needs the bot token in DISCORD_BOT_TOKEN")
    agent = served_agent(settings, discord.agent)
    return LeasedChannel(DISCORD_SERVICE, partial(DiscordChannel, discord, agent, api, token=token))


async def _probe(settings: Settings) -> Probe:
    config = settings.channels.section(DiscordConfig)
    token = settings.secrets.channel("discord_bot_token")
    if token is None:
        return Probe(
            "discord", False, "enabled but DISCORD_BOT_TOKEN is not set", "export DISCORD_BOT_TOKEN=..."
        )
    headers = {"Authorization": f"Bot {token.get_secret_value()}"}
    try:
        async with aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=PROBE_SECONDS)
        ) as client:
            async with client.get(f"{config.api_url}/users/@me") as response:
                status = response.status
                me = await response.json(content_type=None) if status == 200 else {}
            gateway_status = 0
            if status == 200:
                async with client.get(f"{config.api_url}/gateway/bot") as response:
                    gateway_status = response.status
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        detail = f"{config.api_url} does not answer ({type(exc).__name__})"
        return Probe("discord", False, detail, f"check [channels.discord] api_url; {RETRYING}")
    if status == 401:
        detail = f"{config.api_url} refused the bot token (HTTP 401)"
        return Probe("discord", False, detail, "check DISCORD_BOT_TOKEN (the bot's token, developer portal)")
    if status != 200 or gateway_status != 200 or not isinstance(me, dict):
        detail = f"{config.api_url} answered HTTP {status}/{gateway_status}"
        return Probe("discord", False, detail, f"check [channels.discord] api_url; {RETRYING}")
    return Probe("discord", True, f"{config.api_url}: the bot {me.get('username') or '?'}")


PLUGIN = ChannelPlugin(
    DISCORD_SERVICE,
    rank=4,
    configured=lambda settings: settings.channels.section(DiscordConfig).enabled,
    connect=_connect,
    probe=_probe,
    section="[channels.discord]",
)
