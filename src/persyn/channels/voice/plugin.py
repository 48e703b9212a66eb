"""The telephone channel's registration (`channels/registry.py`): its routes are mounted on the
web server when `[voice] enabled` (calls come in over Twilio's webhooks and Media Streams)."""

from __future__ import annotations

from persyn.channels.registry import ChannelPlugin
from persyn.channels.voice.channel import PHONE_SERVICE
from persyn.channels.voice.routes import voice_routes

__all__ = ["PLUGIN"]

PLUGIN = ChannelPlugin(
    PHONE_SERVICE,
    rank=20,
    configured=lambda settings: settings.voice.enabled,
    section="[voice]",
    web_routes=voice_routes,
)
