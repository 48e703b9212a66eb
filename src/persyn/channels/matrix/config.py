"""Matrix's `[channels.matrix]` section and its secrets (`MATRIX_ACCESS_TOKEN`, `MATRIX_PASSWORD`),
declared under the `persyn.channel_settings` entry points: `Settings` validates it with the rest of
the file (`core/config/chat.py`). Imports its base and pydantic only, never the adapter (mautrix):
the configuration loads it. Each key's description is its documentation (the starter file, the
README's table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from persyn.core.section import ChannelSection

__all__ = ["MatrixConfig"]

# Matrix identifiers (spec appendices): @user:server, !room:server, #alias:server.
_MATRIX_USER = re.compile(r"^@[a-z0-9._=/+-]+:[A-Za-z0-9.\-\[\]:]+$")
_MATRIX_ROOM = re.compile(r"^[!#][^\s:]+:[A-Za-z0-9.\-\[\]:]+$")


class MatrixConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {
        "matrix_access_token": "MATRIX_ACCESS_TOKEN",
        "matrix_password": "MATRIX_PASSWORD",
    }

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
        default=300.0,
        gt=0,
        description="Longest wait between reconnection attempts (the wait doubles, each drawn from the upper half of its step).",
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
