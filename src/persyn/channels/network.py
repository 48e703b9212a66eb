"""The channels `persyn run` connects from configuration: the agent link (when the deployment
has more than one agent) and the chat networks configured under `[channels]`."""

from __future__ import annotations

from typing import Protocol

from persyn.channels.agents import AgentLink
from persyn.channels.irc import IrcChannel
from persyn.core.config import Settings
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
        found.append(AgentLink(agents, api))
    irc = settings.channels.irc
    if irc.server:
        password = settings.secrets.irc_password
        found.append(
            IrcChannel(
                irc, agents, api, password=password.get_secret_value() if password is not None else None
            )
        )
    return found
