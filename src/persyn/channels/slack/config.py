"""Slack's `[channels.slack]` section and its secrets (`SLACK_BOT_TOKEN`, `SLACK_SIGNING_SECRET`,
`SLACK_APP_TOKEN`), declared under the `persyn.channel_settings` entry points: `Settings`
validates it with the rest of the file (`core/config/chat.py`). Imports its base and pydantic
only, never the adapter. Each key's description is its documentation (the starter file, the
README's table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from persyn.core.section import ChannelSection, http_base

__all__ = ["SlackConfig"]


class SlackConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {
        "slack_bot_token": "SLACK_BOT_TOKEN",
        "slack_signing_secret": "SLACK_SIGNING_SECRET",
        "slack_app_token": "SLACK_APP_TOKEN",
    }

    enabled: bool = Field(
        default=False,
        description="Serve an agent as a Slack app; the bot token comes from SLACK_BOT_TOKEN.",
    )
    mode: Literal["socket", "events"] = Field(
        default="socket",
        description=(
            "How Slack's events arrive: socket (Socket Mode with SLACK_APP_TOKEN, no public URL) or "
            "events (the Events API at POST /slack/events on the web server, SLACK_SIGNING_SECRET)."
        ),
    )
    api_url: str = Field(
        default="https://slack.com/api/",
        min_length=1,
        description="Base URL of Slack's Web API (a test double's, in tests).",
    )
    agent: str | None = Field(
        default=None,
        description="Name of the agent that is the app's bot user; unset = the only (or first) agent.",
        examples=["Ada"],
    )

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return http_base(url) + "/"
