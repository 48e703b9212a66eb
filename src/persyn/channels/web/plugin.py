"""The web channel's registration (`channels/registry.py`): the web server `persyn run` starts
serves it (`web/`)."""

from __future__ import annotations

from persyn.channels.registry import ChannelPlugin
from persyn.channels.web.channel import SERVICE

__all__ = ["PLUGIN"]

PLUGIN = ChannelPlugin(SERVICE)
