"""The `[tracing]` section (SPEC App. D): one trace per activation, off until turned on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = ["TracingConfig"]


class TracingConfig(Section):
    """Reasoning-pipeline tracing: a timed tree of spans per activation (SPEC App. D)."""

    enabled: bool = Field(
        default=False,
        description="Record one trace per activation (message, reminder, heartbeat): `persyn traces`.",
    )
    content: Literal["full", "metadata"] = Field(
        default="metadata",
        description=(
            "`full` keeps prompts, replies, tool arguments and results on spans (for debugging); "
            "`metadata` keeps only stage, model, tokens and timing: no conversation text leaves the process."
        ),
    )
    exporters: list[Literal["local", "otlp"]] = Field(
        default_factory=lambda: ["local"],
        description=(
            "Where spans go: `local` (JSONL files under data/traces/, read by `persyn traces`) "
            "and/or `otlp` (OTLP/HTTP to a local collector at `otlp_endpoint`)."
        ),
    )
    otlp_endpoint: str = Field(
        default="http://127.0.0.1:4318/v1/traces",
        description="The collector's OTLP/HTTP traces URL (a local collector: Jaeger, Tempo, Phoenix...).",
    )
    otlp_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="How long one export to the collector may take; a slower collector loses spans, never a turn.",
    )
    queue_size: int = Field(
        default=2048,
        ge=1,
        le=1_000_000,
        description="Spans waiting per exporter; beyond it new spans are dropped and counted (`persyn doctor`).",
    )
    max_content_chars: int = Field(
        default=8000,
        ge=100,
        le=1_000_000,
        description='With `content = "full"`, longer inputs and outputs are cut to this many characters.',
    )
    keep_days: int = Field(
        default=14, ge=1, le=3650, description="Local span files older than this are deleted."
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL, e.g. 'http://127.0.0.1:4318/v1/traces'")
        return value

    @field_validator("exporters")
    @classmethod
    def _distinct(cls, value: list[Literal["local", "otlp"]]) -> list[Literal["local", "otlp"]]:
        return list(dict.fromkeys(value))
