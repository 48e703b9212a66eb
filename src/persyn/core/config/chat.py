"""Chat networks and pacing: `[channels.irc]`, `[channels.telegram]`, `[channels.matrix]` and
`[pacing]` (SPEC §3, §4.5).

`core/config/settings.py` composes them into `Settings`. Each key's description is its documentation
(`core/config/template.py` writes the starter file and the README's table from them).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = ["ChannelsConfig", "IrcConfig", "MatrixConfig", "PacingConfig", "PacingRules", "TelegramConfig"]

# RFC 2812 channel names: a prefix, then anything but space, comma, BEL and colon.
_IRC_CHANNEL = re.compile(r"^[#&+!][^\s,\x07:]{1,49}$")
_IRC_NICK = re.compile(r"^[A-Za-z\[\]\\`_^{|}][A-Za-z0-9\[\]\\`_^{|}-]{0,29}$")
# Matrix identifiers (spec appendices): @user:server, !room:server, #alias:server.
_MATRIX_USER = re.compile(r"^@[a-z0-9._=/+-]+:[A-Za-z0-9.\-\[\]:]+$")
_MATRIX_ROOM = re.compile(r"^[!#][^\s:]+:[A-Za-z0-9.\-\[\]:]+$")


class IrcConfig(Section):
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
        default=300.0, gt=0, description="Longest wait between reconnection attempts (the wait doubles)."
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


class TelegramConfig(Section):
    enabled: bool = Field(
        default=False,
        description="Serve an agent as a Telegram bot (Bot API long polling); the token comes from TELEGRAM_BOT_TOKEN.",
    )
    api_url: str = Field(
        default="https://api.telegram.org",
        min_length=1,
        description="Base URL of the Bot API (a local Bot API server, or a test double).",
    )
    agent: str | None = Field(
        default=None,
        description="Name of the agent that is the bot; unset = the only (or first) agent.",
        examples=["Ada"],
    )
    poll_seconds: int = Field(
        default=30, ge=0, le=50, description="How long one getUpdates call waits for messages (long polling)."
    )

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"{url!r} is not an http(s) URL")
        return url.rstrip("/")


class MatrixConfig(Section):
    homeserver: str | None = Field(
        default=None,
        description="Matrix homeserver URL (client-server API); unset = no Matrix. `persyn run` connects to it.",
        examples=["https://matrix.example.org"],
    )
    user_id: str = Field(
        default="@{agent}:localhost",
        min_length=3,
        description=(
            "Each agent's Matrix user id; `{agent}` is replaced by the agent's name (lowercase, spaces "
            "removed). Log-in: MATRIX_ACCESS_TOKEN (one agent) or MATRIX_PASSWORD (every agent's account)."
        ),
        examples=["@ada:example.org"],
    )
    rooms: list[str] = Field(
        default_factory=list[str],
        description='Rooms to join at start, by id or alias, e.g. ["#persyn:example.org"].',
    )
    invites_from: list[str] = Field(
        default_factory=list[str],
        description=(
            'Whose invitations are accepted: user ids ("@sam:example.org"), whole servers (":example.org") '
            'or "*"; empty = users of the agent\'s own homeserver. Others are declined.'
        ),
    )
    join: Literal["allowlist", "contacts"] = Field(
        default="allowlist",
        description=(
            'Which invitations are accepted: "allowlist" = those from `invites_from`; "contacts" = those '
            "from a contact already in the agent's directory (someone it has met on this homeserver) or "
            "listed in `invites_from` (no own-homeserver default then). Others are declined."
        ),
    )
    agents: list[str] = Field(
        default_factory=list[str],
        description="Names of the agents on Matrix; empty = every configured agent.",
    )
    bots: list[str] = Field(
        default_factory=list[str],
        description="User ids known to be bots or agents (besides this deployment's own): their contacts are marked agent.",
    )
    threads: bool = Field(
        default=True,
        description=(
            "In a room, answer in the thread of the message answered (starting one on it); false = a "
            "reply in the room's timeline. Direct chats always get replies, threads stay threads."
        ),
    )
    sync_timeout_seconds: int = Field(
        default=30, ge=0, le=120, description="How long one /sync call waits for news (long polling)."
    )
    timeline_limit: int = Field(
        default=50,
        ge=1,
        le=1000,
        description="Messages per room in one sync; a longer gap (after a downtime) is fetched page by page.",
    )
    reconnect_min_seconds: float = Field(
        default=1.0, gt=0, description="First wait before syncing again after the homeserver was lost."
    )
    reconnect_max_seconds: float = Field(
        default=300.0, gt=0, description="Longest wait between reconnection attempts (the wait doubles)."
    )

    @field_validator("homeserver")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("https://", "http://")):
            raise ValueError(f"{url!r} is not an http(s) URL")
        return url.rstrip("/") if url else url

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, user_id: str) -> str:
        if not _MATRIX_USER.match(user_id.replace("{agent}", "agent")):
            raise ValueError(f"{user_id!r} is not a Matrix user id, e.g. '@ada:example.org'")
        return user_id

    @field_validator("rooms")
    @classmethod
    def _rooms(cls, rooms: list[str]) -> list[str]:
        for room in rooms:
            if not _MATRIX_ROOM.match(room):
                raise ValueError(f"{room!r} is not a Matrix room id or alias, e.g. '#persyn:example.org'")
        return rooms

    @field_validator("bots")
    @classmethod
    def _bots(cls, users: list[str]) -> list[str]:
        for user in users:
            if not _MATRIX_USER.match(user):
                raise ValueError(f"{user!r} is not a Matrix user id, e.g. '@helper:example.org'")
        return users

    @field_validator("invites_from")
    @classmethod
    def _inviters(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            if (
                entry != "*"
                and not _MATRIX_USER.match(entry)
                and not re.match(r"^:[A-Za-z0-9.\-\[\]:]+$", entry)
            ):
                raise ValueError(
                    f"{entry!r} is not a user id ('@sam:example.org'), a server (':example.org') or '*'"
                )
        return entries

    def user_for(self, agent_name: str) -> str:
        """The user id `agent_name` uses (the template filled with its lowercase name)."""
        local = re.sub(r"[^a-z0-9._=/+-]", "", agent_name.lower())
        return self.user_id.replace("{agent}", local or "agent")


class ChannelsConfig(Section):
    irc: IrcConfig = IrcConfig()
    telegram: TelegramConfig = TelegramConfig()
    matrix: MatrixConfig = MatrixConfig()


class PacingRules(Section):
    """One channel's pacing (SPEC §4.5); the `agent_` keys apply when the other party is an agent."""

    listen_seconds: float = Field(
        default=3.0,
        ge=0,
        description=(
            "Listening period before answering in a room or to an agent: messages arriving meanwhile are "
            "answered together, by one activation."
        ),
    )
    min_interval_seconds: float = Field(
        default=2.0, ge=0, description="Least time between two of the agent's messages on one channel."
    )
    agent_min_interval_seconds: float = Field(
        default=20.0, ge=0, description="The same when the other party is an agent."
    )
    jitter_seconds: float = Field(
        default=2.0, ge=0, description="Up to this much randomized delay is added before each message."
    )
    backoff_factor: float = Field(
        default=2.0,
        ge=1,
        le=10,
        description="The interval is multiplied by this for every agent-only turn in a row (exchanges that speed up slow down).",
    )
    max_agent_turns: int = Field(
        default=8,
        ge=1,
        description=(
            "An exchange with no human in it ends after this many messages in a row by agents (this one "
            "included); a human speaking resets it."
        ),
    )
    agent_reply_tokens: int = Field(
        default=2000,
        ge=1,
        description=(
            "Reply tokens (4 characters a token) per channel in a rolling 24 hours while the other party "
            "is an agent; past it replies there are blocked (humans have [autonomy] channel_reply_tokens)."
        ),
    )


class PacingConfig(PacingRules):
    channels: dict[str, PacingRules] = Field(
        default_factory=dict[str, PacingRules],
        description='Per-channel rules by "service" or "service:channel", e.g. [pacing.channels."irc:#lab"].',
    )

    def rules_for(self, service: str, channel: str) -> PacingRules:
        """The most specific rules: service:channel, then service, then these defaults."""
        return self.channels.get(f"{service}:{channel}") or self.channels.get(service) or self
