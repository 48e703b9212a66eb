"""`[prices]` and `[metering]`: what a model call costs, and how every call is counted.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = ["MeteringConfig", "Price"]


class Price(Section):
    """US dollars per million tokens of one model string, what `persyn usage` costs with."""

    input: float = Field(ge=0, description="Per million input tokens.", examples=[3.0])
    output: float = Field(ge=0, description="Per million output tokens.", examples=[15.0])
    cache_read: float | None = Field(
        default=None,
        ge=0,
        description="Per million tokens read from the prompt cache (unset: the input price).",
        examples=[0.3],
    )
    cache_write: float | None = Field(
        default=None,
        ge=0,
        description="Per million tokens written to the prompt cache (unset: the input price).",
        examples=[3.75],
    )
    per_request: dict[str, float] = Field(
        default_factory=dict[str, float],
        description=(
            "US dollars per request of a provider-run tool, by tool. A tool without a price here is "
            "counted on the usage record, not costed."
        ),
        examples=[{"web_search": 0.01}],
    )
    per_audio_minute: float | None = Field(
        default=None,
        ge=0,
        description=(
            "US dollars per minute of audio transcribed (`[models] transcribe`, e.g. "
            "`openai:whisper-1`, priced per minute; its token prices are then 0). Unset: a "
            "transcription is counted in seconds, not costed."
        ),
        examples=[0.006],
    )

    @field_validator("per_request")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for tool, dollars in value.items():
            if dollars < 0:
                raise ValueError(f"per_request price of {tool!r} is negative: {dollars!r}")
        return value


class MeteringConfig(Section):
    """Every model call is metered (SPEC App. C)."""

    event_log: bool = Field(
        default=True,
        description="Write usage.jsonl beside persyn.toml: the exact ledger `persyn usage` reads.",
    )
    prometheus_port: int = Field(
        default=0, ge=0, le=65535, description="Above 0, serve usage counters on PORT/metrics."
    )
    prometheus_host: str = Field(default="127.0.0.1", description="The address the counters are served on.")
