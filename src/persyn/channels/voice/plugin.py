"""The telephone channel's registration (`channels/registry.py`): its routes are mounted on the
web server when `[voice] enabled` (calls come in over Twilio's webhooks and Media Streams), and
`persyn doctor` checks what a call needs: the auth token, the public URL, the speech engines,
and for calls the agent places (`[voice.twilio] from_number`) the REST API: reachable at
`api_url` and taking the account's credentials (it fetches the account resource)."""

from __future__ import annotations

import os

from persyn.channels.registry import ChannelPlugin, Probe
from persyn.channels.voice.channel import PHONE_SERVICE
from persyn.channels.voice.routes import TOKEN_VARIABLE, voice_routes
from persyn.channels.voice.twilio import TwilioCalls, TwilioRefused
from persyn.core.config import Settings
from persyn.core.errors import ConfigError
from persyn.senses.hearing import build_transcriber
from persyn.voice.speak import build_speaker

__all__ = ["PLUGIN"]


async def _outbound(settings: Settings) -> tuple[bool, str]:
    """The outbound side: whether the REST API takes our credentials, and what to say."""
    twilio = settings.voice.twilio
    if not twilio.from_number:
        return True, "no outbound calls (no [voice.twilio] from_number)"
    rest = TwilioCalls(twilio.api_url, twilio.account_sid, os.environ.get(TOKEN_VARIABLE, ""))
    try:
        await rest.account()
    except TwilioRefused as exc:
        return False, f"outbound calls from {twilio.from_number}: the API at {twilio.api_url} refused: {exc}"
    return True, f"outbound calls from {twilio.from_number} through {twilio.api_url}"


async def _probe(settings: Settings) -> Probe:
    """Inbound, nothing is called (Twilio reaches us); outbound, the REST API's account is fetched."""
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
    outbound_ok, outbound = await _outbound(settings)
    inbound = (
        f"calls to {config.twilio.public_url}/voice/twilio/incoming ({config.transcribe}, {config.speak})"
    )
    if not outbound_ok:
        return Probe(
            "voice",
            False,
            f"{inbound}; {outbound}",
            "check [voice.twilio] api_url, account_sid and the token",
        )
    return Probe("voice", True, f"{inbound}; {outbound}")


PLUGIN = ChannelPlugin(
    PHONE_SERVICE,
    rank=20,
    configured=lambda settings: settings.voice.enabled,
    probe=_probe,
    section="[voice]",
    web_routes=voice_routes,
)
