"""Telegram's `[channels.telegram]` section and its secret (`TELEGRAM_BOT_TOKEN`), declared under
the `persyn.channel_settings` entry points: `Settings` validates it with the rest of the file
(`core/config/chat.py`). Imports its base and pydantic only, never the adapter: the configuration
loads it. Each key's description is its documentation (the starter file, the README's table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, field_validator

from persyn.core.section import ChannelSection, http_base

__all__ = ["TelegramConfig"]


class TelegramConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {"telegram_bot_token": "TELEGRAM_BOT_TOKEN"}

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

    reconnect_min_seconds: float = Field(
        default=1.0,
        gt=0,
        description="First wait before polling again after the Bot API failed or was unreachable.",
    )
    reconnect_max_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Longest wait between attempts while the Bot API stays unreachable (the wait doubles, each drawn from the upper half of its step).",
    )

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return http_base(url)
