"""The telephone channel's registration (`channels/registry.py`): its routes are mounted on the
web server when `[voice] enabled` (calls come in over Twilio's webhooks and Media Streams), and
`persyn doctor` checks what a call needs: the auth token, the public URL, the speech engines."""

from __future__ import annotations

import os

from persyn.channels.registry import ChannelPlugin, Probe
from persyn.channels.voice.channel import PHONE_SERVICE
from persyn.channels.voice.routes import TOKEN_VARIABLE, voice_routes
from persyn.core.config import Settings
from persyn.core.errors import ConfigError
from persyn.senses.hearing import build_transcriber
from persyn.voice.speak import build_speaker

__all__ = ["PLUGIN"]


async def _probe(settings: Settings) -> Probe:
    """Nothing is called: Twilio is reached by it, not the other way."""
    config = settings.voice
    if not os.environ.get(TOKEN_VARIABLE):
        return Probe(
            "voice", False, f"enabled but {TOKEN_VARIABLE} is not set", f"export {TOKEN_VARIABLE}=..."
        )
    if not config.twilio.public_url:
        return Probe(
            "voice",
            False,
            "enabled but [voice.twilio] public_url is not set",
            "set it to the URL Twilio reaches",
        )
    try:
        build_transcriber(config.transcribe)
        build_speaker(config.speak, voice=config.speak_voice)
    except ConfigError as exc:
        return Probe(
            "voice", False, f"the speech engines cannot start: {exc}", "check [voice] transcribe and speak"
        )
    return Probe(
        "voice",
        True,
        f"calls to {config.twilio.public_url}/voice/twilio/incoming ({config.transcribe}, {config.speak})",
    )


PLUGIN = ChannelPlugin(
    PHONE_SERVICE,
    rank=20,
    configured=lambda settings: settings.voice.enabled,
    probe=_probe,
    section="[voice]",
    web_routes=voice_routes,
)
