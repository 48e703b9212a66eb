"""The base of every configuration section: strict, frozen, no unknown key, bounded durations;
and of a chat network's `[channels.NAME]` section, which also declares the network's secrets.

Outside `core/config/` so that a network's section (`channels/NAME/config.py`) imports its base
without importing the configuration: `core/config/chat.py` loads those sections while the
configuration itself is being imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["ChannelSection", "Section", "http_base"]


class Section(BaseModel):
    # Strict: `true` is not an integer and "5" is not a number (TOML and the environment
    # parser already give numbers their type); no inf or nan, which pass every bound check
    # and then break the arithmetic that uses them.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _bounded_duration(cls, value: object, info: ValidationInfo) -> object:
        # A duration past what `timedelta` holds (about 2.7 million years) passes every
        # lower bound and then breaks each activation or housekeeping tick that adds it to
        # a time; nothing in a deployment's life needs more than a century.
        name = info.field_name or ""
        unit = next((seconds for suffix, seconds in _DURATION_UNITS.items() if name.endswith(suffix)), None)
        if unit is not None and isinstance(value, int | float) and value * unit > _LONGEST_DURATION_SECONDS:
            raise ValueError(
                f"{value!r} is longer than 100 years; use at most {_LONGEST_DURATION_SECONDS / unit:g}"
            )
        return value


_DURATION_UNITS = {"_seconds": 1, "_minutes": 60, "_hours": 3600, "_days": 86400}
_LONGEST_DURATION_SECONDS = 100 * 365 * 86400


class ChannelSection(Section):
    """A chat network's `[channels.NAME]` section, declared by its folder under the
    `persyn.channel_settings` entry points (`core/config/chat.py`). Every one of its keys has a
    default: a network nobody configured is off.

    `secrets` names the network's secrets and the environment variable each is read from
    (`{"irc_password": "IRC_PASSWORD"}`): never a key of the file, served by `Secrets.channel`."""

    secrets: ClassVar[Mapping[str, str]] = {}


def http_base(url: str) -> str:
    """A configured base URL (an API's, a public address): http(s) only, without its trailing
    slash. For a key's validator; the ValueError names the value."""
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"{url!r} is not an http(s) URL")
    return url.rstrip("/")
