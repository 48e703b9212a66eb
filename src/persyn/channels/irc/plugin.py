"""IRC's registration (`channels/registry.py`): connected when `[channels.irc] server` is set;
`persyn doctor` checks the password is there when SASL needs it and that the server answers."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from functools import partial

from persyn.channels.irc.channel import SERVICE, IrcChannel
from persyn.channels.irc.config import IrcConfig
from persyn.channels.registry import PROBE_SECONDS, RETRYING, ChannelPlugin, Probe, revealed
from persyn.core.config import Settings
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = ["PLUGIN"]


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    agents = {agent.id: agent for agent in settings.agents}
    password = revealed(settings.secrets.channel("irc_password"))
    config = settings.channels.section(IrcConfig)
    return LeasedChannel(SERVICE, partial(IrcChannel, config, agents, api, password=password))


async def _probe(settings: Settings) -> Probe:
    config = settings.channels.section(IrcConfig)
    password = settings.secrets.channel("irc_password")
    where = f"{config.server}:{config.port}" + (" (TLS)" if config.tls else "")
    rooms = ", ".join(config.channels) or "no rooms"
    if config.sasl and password is None:
        return Probe(
            "irc", False, f"{where}: sasl = true but IRC_PASSWORD is not set", "export IRC_PASSWORD=..."
        )
    try:
        context = ssl.create_default_context() if config.tls else None
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(config.server, config.port, ssl=context), PROBE_SECONDS
        )
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        detail = f"{where} does not answer ({type(exc).__name__}: {exc})"
        return Probe("irc", False, detail, f"check [channels.irc] server, port and tls; {RETRYING}")
    said = "IRC_PASSWORD set" if password is not None else "no password"
    return Probe("irc", True, f"{where} answers; {said}; rooms {rooms}")


PLUGIN = ChannelPlugin(
    SERVICE,
    rank=1,
    configured=lambda settings: bool(settings.channels.section(IrcConfig).server),
    connect=_connect,
    probe=_probe,
    section="[channels.irc]",
)
