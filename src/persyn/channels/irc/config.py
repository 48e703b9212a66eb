"""IRC's `[channels.irc]` section and its secret (`IRC_PASSWORD`), declared under the
`persyn.channel_settings` entry points: `Settings` validates it with the rest of the file
(`core/config/chat.py`). Imports its base and pydantic only, never the adapter: the configuration
loads it. Each key's description is its documentation (the starter file, the README's table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, field_validator

from persyn.core.section import ChannelSection

__all__ = ["IrcConfig"]

# RFC 2812 channel names: a prefix, then anything but space, comma, BEL and colon.
_IRC_CHANNEL = re.compile(r"^[#&+!][^\s,\x07:]{1,49}$")
_IRC_NICK = re.compile(r"^[A-Za-z\[\]\\`_^{|}][A-Za-z0-9\[\]\\`_^{|}-]{0,29}$")


class IrcConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {"irc_password": "IRC_PASSWORD"}

    server: str | None = Field(
        default=None,
        description="IRC server host name; unset = no IRC. `persyn run` connects every served agent to it.",
        examples=["irc.libera.chat"],
    )
    port: int = Field(default=6697, ge=1, le=65535, description="IRC server port (6697 is TLS, 6667 plain).")
    tls: bool = Field(default=True, description="Connect with TLS (the server's certificate is verified).")
    nick: str = Field(
        default="{agent}",
        min_length=1,
        max_length=30,
        description="Nick of each agent; `{agent}` is replaced by the agent's name (spaces removed).",
    )
    sasl: bool = Field(
        default=False,
        description="Log in with SASL PLAIN as the nick, with the password from IRC_PASSWORD (else PASS).",
    )
    channels: list[str] = Field(
        default_factory=list[str],
        description='The rooms to join, e.g. ["#persyn"]; direct messages are always received.',
    )
    agents: list[str] = Field(
        default_factory=list[str],
        description="Names of the agents on IRC; empty = every configured agent.",
    )
    bots: list[str] = Field(
        default_factory=list[str],
        description="Nicks known to be bots or agents (besides this deployment's own): their contacts are marked agent.",
    )
    line_bytes: int = Field(
        default=400,
        ge=64,
        le=480,
        description="Longest text of one PRIVMSG in bytes; longer replies are split at word boundaries.",
    )
    reconnect_min_seconds: float = Field(
        default=1.0, gt=0, description="First wait before reconnecting after the connection is lost."
    )
    reconnect_max_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Longest wait between reconnection attempts (the wait doubles, each drawn from the upper half of its step).",
    )

    @field_validator("channels")
    @classmethod
    def _room_names(cls, rooms: list[str]) -> list[str]:
        for room in rooms:
            if not _IRC_CHANNEL.match(room):
                raise ValueError(f"{room!r} is not an IRC channel name (e.g. '#persyn')")
        return rooms

    @field_validator("bots")
    @classmethod
    def _nicks(cls, nicks: list[str]) -> list[str]:
        for nick in nicks:
            if not _IRC_NICK.match(nick):
                raise ValueError(f"{nick!r} is not an IRC nick")
        return nicks

    def nick_for(self, agent_name: str) -> str:
        """The nick `agent_name` uses (the template filled, characters IRC refuses dropped)."""
        nick = self.nick.replace("{agent}", agent_name.replace(" ", ""))
        nick = re.sub(r"[^A-Za-z0-9\[\]\\`_^{|}-]", "", nick)[:30]
        if not nick or not _IRC_NICK.match(nick):
            nick = f"persyn_{nick}"[:30]
        return nick
