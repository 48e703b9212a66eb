"""Chat networks and pacing: `[channels]` and `[pacing]` (SPEC §3, §4.5).

`[channels]` holds one section per chat network, and each network declares its own: its folder's
`config.py` holds a `ChannelSection` (`core/section.py`: the keys, and the secrets with the
environment variable each is read from), named by one line under the `persyn.channel_settings`
entry points (`irc = "persyn.channels.irc.config:IrcConfig"`; `core/plugins.py` reads them).
`channels_model` builds `[channels]` from them when the configuration is imported, so `Settings`
validates a network's keys with the rest of the file, strictly and at load: an error names the
key (`channels.irc.port`), an unknown `[channels.foo]` is refused, `PERSYN_CHANNELS__IRC__PORT`
sets a key, and the starter file and the README's table list them. This is how the gateway finds
a model provider (`persyn.model_providers`): by entry point, never by an import of ours, so `core`
names no chat network and a new one is its folder and its lines in `pyproject.toml`.

`core/config/settings.py` composes these into `Settings`. Each key's description is its
documentation (`core/config/template.py` writes the starter file and the README's table from them).
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from pydantic import Field, create_model

from persyn.core.plugins import loaded_by_name
from persyn.core.section import ChannelSection, Section

__all__ = ["ENTRY_POINT_GROUP", "ChannelsConfig", "PacingConfig", "PacingRules", "channels_model"]

ENTRY_POINT_GROUP = "persyn.channel_settings"

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ChannelSection)


class ChannelsConfig(Section):
    # No docstring: the starter file writes a section's docstring under its header.
    # `channels_model` derives the `[channels]` of a deployment from this, one field per
    # declared network (the entry point's name is its key).

    def section(self, kind: type[S]) -> S:
        """The network section of type `kind` (`settings.channels.section(IrcConfig)`)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            if type(value) is kind:
                return value
        raise LookupError(
            f"no [channels] section is a {kind.__name__}: declare it under the "
            f"{ENTRY_POINT_GROUP!r} entry points"
        )

    @classmethod
    def secret_variables(cls) -> dict[str, str]:
        """Every network's secrets: each one's name and the environment variable it is read from."""
        found: dict[str, str] = {}
        for info in cls.model_fields.values():
            kind = info.annotation
            if isinstance(kind, type) and issubclass(kind, ChannelSection):
                found |= kind.secrets
        return found


def channels_model() -> type[ChannelsConfig]:
    """`[channels]` with a section for every network declared under `persyn.channel_settings`.
    One that fails to load, is no `ChannelSection`, has a key without a default, or names a
    secret another network already named is logged and skipped: the others still load."""
    fields: dict[str, Any] = {}
    secrets: dict[str, str] = {}
    for name, kind in loaded_by_name(ENTRY_POINT_GROUP, type).items():
        if not issubclass(kind, ChannelSection):
            log.warning("%s entry %r (%s) is not a ChannelSection", ENTRY_POINT_GROUP, name, kind.__name__)
            continue
        shared = sorted(
            secret
            for secret, variable in kind.secrets.items()
            if secret in secrets or variable in secrets.values()
        )
        if shared:
            log.warning(
                "%s entry %r names secrets another network named: %s", ENTRY_POINT_GROUP, name, shared
            )
            continue
        try:
            default = kind()
        except ValueError:
            log.warning("%s entry %r has a key without a default", ENTRY_POINT_GROUP, name, exc_info=True)
            continue
        fields[name] = (kind, default)
        secrets |= kind.secrets
    return create_model("ChannelsConfig", __base__=ChannelsConfig, __module__=__name__, **fields)


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
