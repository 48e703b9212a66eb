"""The terminal's registration (`channels/registry.py`): `persyn chat` starts it itself."""

from __future__ import annotations

from persyn.channels.registry import ChannelPlugin
from persyn.channels.terminal.channel import SERVICE

__all__ = ["PLUGIN"]

PLUGIN = ChannelPlugin(SERVICE)
