"""The channels `persyn run` connects from configuration: every registered channel
(`channels/registry.py`) the settings ask for — the agent link when the deployment has more
than one agent, the chat networks configured under `[channels]` — each leased so that one
process of the deployment connects it (`runtime/delivery/channel_leases.py`)."""

from __future__ import annotations

from persyn.channels.registry import channel_plugins
from persyn.core.config import Settings
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = ["configured_channels"]


def configured_channels(settings: Settings, api: RuntimeAPI) -> list[LeasedChannel]:
    """The channels `settings` asks for, checked now and built when connected. A missing
    credential raises `ConfigError` here, before anything connects."""
    return [
        plugin.connect(settings, api)
        for plugin in channel_plugins()
        if plugin.connect is not None and plugin.configured(settings)
    ]
