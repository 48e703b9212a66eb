"""The channels registry: each chat network or surface under `channels/` registers one
`ChannelPlugin` in the `persyn.channels` entry-point group of its distribution
(`core/plugins.py`), so a new network is its folder plus one line in `pyproject.toml`, and one
more under `persyn.channel_settings` for its `[channels.NAME]` section (`config.py`, which the
configuration loads: `core/config/chat.py`).

A plugin names its service and, for a network `persyn run` connects, says whether the settings
ask for it, how to build its leased channel (`runtime/channel.py`: built afresh each time a
process takes the lease) and how `persyn doctor` probes it. The surfaces a command starts itself
(the terminal, the console, the web channel) register their service only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pydantic import SecretStr
from starlette.routing import BaseRoute

from persyn.core.config import AgentConfig, Settings
from persyn.core.plugins import loaded
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROBE_SECONDS",
    "RETRYING",
    "ChannelPlugin",
    "Probe",
    "channel_plugins",
    "network_web_routes",
    "revealed",
    "served_agent",
]


ENTRY_POINT_GROUP = "persyn.channels"
# A probe is bounded and changes nothing on the server (no log-in that would leave a device behind).
PROBE_SECONDS = 5.0
RETRYING = "`persyn run` keeps retrying it; the agents answer on their other channels meanwhile"


@dataclass(frozen=True)
class Probe:
    """One line of `persyn doctor` about a network (`ops/doctor/channels.py` shows it)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False


def _never(settings: Settings) -> bool:
    return False


@dataclass(frozen=True)
class ChannelPlugin:
    """A channel's registration. `rank` orders the networks where order shows (`persyn run`
    connects them, `persyn doctor` lists them, in rank order)."""

    service: str
    rank: int = 100
    configured: Callable[[Settings], bool] = _never
    # The leased channel the settings ask for; a missing credential raises `ConfigError`.
    connect: Callable[[Settings, RuntimeAPI], LeasedChannel] | None = None
    probe: Callable[[Settings], Awaitable[Probe]] | None = None
    section: str | None = None  # its configuration section, e.g. "[channels.irc]"
    # Routes the web server (`web/app.py`) adds when `configured`: where a network delivers to
    # us over HTTP (webhooks, media streams). They authenticate the network's way (its
    # signature), not by web key, and hand what they receive to the runtime like any channel.
    web_routes: Callable[[Settings, RuntimeAPI], Sequence[BaseRoute]] | None = None


_loaded: tuple[ChannelPlugin, ...] | None = None


def channel_plugins() -> tuple[ChannelPlugin, ...]:
    """Every registered channel (loaded once per process), in rank order. One that fails to
    load is logged and skipped: the others still connect."""
    global _loaded
    if _loaded is None:
        _loaded = tuple(
            sorted(loaded(ENTRY_POINT_GROUP, ChannelPlugin), key=lambda plugin: (plugin.rank, plugin.service))
        )
    return _loaded


def network_web_routes(settings: Settings, api: RuntimeAPI) -> list[BaseRoute]:
    """The web routes of every configured channel that has some (`ChannelPlugin.web_routes`)."""
    return [
        route
        for plugin in channel_plugins()
        if plugin.web_routes is not None and plugin.configured(settings)
        for route in plugin.web_routes(settings, api)
    ]


def served_agent(settings: Settings, name: str | None) -> AgentConfig:
    """The agent a one-agent network serves: `name` (a section's `agent`), else the only or first
    agent of the deployment. An unknown name raises `ConfigError`, naming it."""
    return settings.agent(name) if name or len(settings.agents) == 1 else settings.agents[0]


def revealed(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()
