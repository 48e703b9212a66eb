"""`[images]`: the image generation API (its key is read from the variable `key_env` names).

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = ["ImagesConfig"]


class ImagesConfig(Section):
    """`generate_image` and `edit_image` (ARCHITECTURE §21): an OpenAI-compatible images API.
    Off until `base_url` is set; each render is priced per image from `[prices.images]`."""

    base_url: str | None = Field(
        default=None,
        description=(
            "The images API's base URL, e.g. https://api.openai.com/v1 (POST BASE/images/generations "
            "and BASE/images/edits); unset = no image tools."
        ),
        examples=["https://api.openai.com/v1"],
    )
    model: str = Field(
        default="gpt-image-1",
        min_length=1,
        max_length=200,
        description="The model named in each request, and the usage ledger's model for each render.",
    )
    key_env: str = Field(
        default="OPENAI_API_KEY",
        pattern=r"[A-Za-z_][A-Za-z0-9_]*",
        description="The environment variable holding the API key (sent as a bearer token; unset = none sent).",
    )
    size: str = Field(
        default="1024x1024",
        pattern=r"(auto|[1-9][0-9]{1,4}x[1-9][0-9]{1,4})",
        description="The image size asked for when the agent names none (WIDTHxHEIGHT or auto).",
    )
    timeout_seconds: float = Field(
        default=180.0, gt=0, le=3600, description="A render slower than this (in total) has failed."
    )
    max_bytes: int = Field(
        default=10_000_000,
        ge=1024,
        le=200_000_000,
        description="A response larger than this is not read: the render has failed.",
    )
    max_prompt_chars: int = Field(
        default=4000, ge=10, le=32_000, description="Longest prompt the tools accept."
    )
    max_per_day: int = Field(
        default=50,
        ge=1,
        le=100_000,
        description="Renders one agent may ask for in any 24 hours (waiting or made; a failed one is not counted): a looping model's bill has a ceiling.",
    )

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"[images] base_url must be an http(s) URL, not {value!r}")
        return value.rstrip("/") if value else value
