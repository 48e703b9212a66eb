"""The channels `persyn run` connects from configuration: the agent link (when the deployment
has more than one agent) and the chat networks configured under `[channels]`."""

from __future__ import annotations

from typing import Protocol

from persyn.channels.agents import AgentLink
from persyn.channels.irc import IrcChannel
from persyn.channels.telegram import TelegramChannel
from persyn.core.config import Settings
from persyn.core.errors import ConfigError
from persyn.runtime.api import RuntimeAPI

__all__ = ["NetworkChannel", "configured_channels"]


class NetworkChannel(Protocol):
    """A channel with a lifespan of its own (connections, polling)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def configured_channels(settings: Settings, api: RuntimeAPI) -> list[NetworkChannel]:
    """The channels `settings` asks for, built but not started."""
    agents = {agent.id: agent for agent in settings.agents}
    found: list[NetworkChannel] = []
    if len(agents) > 1:
        found.append(AgentLink(agents, api, max_message_chars=settings.conversation.max_message_chars))
    irc = settings.channels.irc
    if irc.server:
        password = settings.secrets.irc_password
        found.append(
            IrcChannel(
                irc, agents, api, password=password.get_secret_value() if password is not None else None
            )
        )
    telegram = settings.channels.telegram
    if telegram.enabled:
        token = settings.secrets.telegram_bot_token
        if token is None:
            raise ConfigError("[channels.telegram] enabled = true needs the bot token in TELEGRAM_BOT_TOKEN")
        agent = (
            settings.agent(telegram.agent)
            if telegram.agent or len(settings.agents) == 1
            else settings.agents[0]
        )
        found.append(TelegramChannel(telegram, agent, api, token=token.get_secret_value()))
    matrix = settings.channels.matrix
    if matrix.homeserver:
        # Imported only when configured: mautrix and aiohttp take ~0.5 s to import.
        from persyn.channels.matrix import MatrixChannel

        token, password = settings.secrets.matrix_access_token, settings.secrets.matrix_password
        found.append(
            MatrixChannel(
                matrix,
                agents,
                api,
                state_dir=settings.data_dir / "matrix",
                access_token=token.get_secret_value() if token is not None else None,
                password=password.get_secret_value() if password is not None else None,
            )
        )
    return found
