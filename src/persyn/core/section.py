"""The base of every configuration section: strict, frozen, no unknown key, bounded durations."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["Section"]


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
