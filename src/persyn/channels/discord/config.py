"""Discord's `[channels.discord]` section and its secret (`DISCORD_BOT_TOKEN`), declared under the
`persyn.channel_settings` entry points: `Settings` validates it with the rest of the file
(`core/config/chat.py`). Imports its base and pydantic only, never the adapter. Each key's
description is its documentation (the starter file, the README's table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, field_validator

from persyn.core.section import ChannelSection, http_base

__all__ = ["DiscordConfig"]


class DiscordConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {"discord_bot_token": "DISCORD_BOT_TOKEN"}

    enabled: bool = Field(
        default=False,
        description="Serve an agent as a Discord bot (Gateway v10 and REST); the token comes from DISCORD_BOT_TOKEN.",
    )
    api_url: str = Field(
        default="https://discord.com/api/v10",
        min_length=1,
        description="Base URL of Discord's REST API, version included (a test double's, in tests).",
    )
    gateway_url: str | None = Field(
        default=None,
        description="The Gateway's WebSocket URL; unset = the one GET /gateway/bot names.",
        examples=["wss://gateway.discord.gg"],
    )
    agent: str | None = Field(
        default=None,
        description="Name of the agent that is the bot; unset = the only (or first) agent.",
        examples=["Ada"],
    )

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return http_base(url)

    @field_validator("gateway_url")
    @classmethod
    def _ws_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("wss://", "ws://")):
            raise ValueError(f"{url!r} is not a ws(s) URL")
        return url
