"""The channels `persyn run` connects from configuration: the agent link (when the deployment
has more than one agent) and the chat networks configured under `[channels]`, each leased so
that one process of the deployment connects it (`runtime/durable/channel_leases.py`)."""

from __future__ import annotations

from functools import partial

from pydantic import SecretStr

from persyn.channels.agents.link import AGENT_SERVICE, AgentLink
from persyn.channels.irc.channel import SERVICE as IRC_SERVICE
from persyn.channels.irc.channel import IrcChannel
from persyn.channels.telegram.channel import TELEGRAM_SERVICE, TelegramChannel
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ConfigError
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel, NetworkChannel

__all__ = ["configured_channels"]

MATRIX_SERVICE = "matrix"  # `channels/matrix/channel.py`'s, named here so as not to import it


def configured_channels(settings: Settings, api: RuntimeAPI) -> list[LeasedChannel]:
    """The channels `settings` asks for, checked now and built when connected. A missing
    credential raises `ConfigError` here, before anything connects."""
    agents = {agent.id: agent for agent in settings.agents}
    secrets = settings.secrets
    found: list[LeasedChannel] = []
    if len(agents) > 1:
        chars = settings.conversation.max_message_chars
        found.append(LeasedChannel(AGENT_SERVICE, partial(AgentLink, agents, api, max_message_chars=chars)))
    irc = settings.channels.irc
    if irc.server:
        irc_password = _revealed(secrets.irc_password)
        found.append(LeasedChannel(IRC_SERVICE, partial(IrcChannel, irc, agents, api, password=irc_password)))
    telegram = settings.channels.telegram
    if telegram.enabled:
        token = _revealed(secrets.telegram_bot_token)
        if token is None:
            raise ConfigError("[channels.telegram] enabled = true needs the bot token in TELEGRAM_BOT_TOKEN")
        agent = (
            settings.agent(telegram.agent)
            if telegram.agent or len(settings.agents) == 1
            else settings.agents[0]
        )
        found.append(
            LeasedChannel(TELEGRAM_SERVICE, partial(TelegramChannel, telegram, agent, api, token=token))
        )
    matrix = settings.channels.matrix
    if matrix.homeserver:
        found.append(
            LeasedChannel(
                MATRIX_SERVICE,
                partial(
                    _matrix_channel,
                    settings,
                    agents,
                    api,
                    access_token=_revealed(secrets.matrix_access_token),
                    password=_revealed(secrets.matrix_password),
                ),
            )
        )
    return found


def _revealed(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()


def _matrix_channel(
    settings: Settings,
    agents: dict[str, AgentConfig],
    api: RuntimeAPI,
    *,
    access_token: str | None,
    password: str | None,
) -> NetworkChannel:
    # Imported only when connected: mautrix and aiohttp take ~0.5 s to import.
    from persyn.channels.matrix.channel import MatrixChannel

    return MatrixChannel(
        settings.channels.matrix,
        agents,
        api,
        state_dir=settings.data_dir / "matrix",
        access_token=access_token,
        password=password,
    )
