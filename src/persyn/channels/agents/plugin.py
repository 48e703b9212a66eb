"""The agent link's registration (`channels/registry.py`): connected when the deployment has
more than one agent."""

from __future__ import annotations

from functools import partial

from persyn.channels.agents.link import AGENT_SERVICE, AgentLink
from persyn.channels.registry import ChannelPlugin
from persyn.core.config import Settings
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = ["PLUGIN"]


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    agents = {agent.id: agent for agent in settings.agents}
    chars = settings.conversation.max_message_chars
    return LeasedChannel(AGENT_SERVICE, partial(AgentLink, agents, api, max_message_chars=chars))


PLUGIN = ChannelPlugin(
    AGENT_SERVICE, rank=0, configured=lambda settings: len(settings.agents) > 1, connect=_connect
)
