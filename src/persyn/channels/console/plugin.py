"""The console's registration (`channels/registry.py`): `persyn console` starts it itself, on the
terminal's service (the operator speaks there either way)."""

from __future__ import annotations

from persyn.channels.registry import ChannelPlugin
from persyn.channels.terminal.channel import SERVICE

__all__ = ["PLUGIN"]

PLUGIN = ChannelPlugin(SERVICE)
