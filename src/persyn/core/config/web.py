"""The `[web]` section: the web channel `persyn run` serves (HTTP API, chat page, directory).

Composed into `Settings` by `core/config/settings.py`; every key's description is its documentation.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = ["WebConfig", "is_loopback_host"]


def is_loopback_host(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebConfig(Section):
    """The web channel: an OpenAI-compatible API, a native API with live events, a chat page."""

    enabled: bool = Field(default=False, description="Serve the web channel from `persyn run`.")
    host: str = Field(
        default="127.0.0.1",
        min_length=1,
        max_length=255,
        description=(
            "Address to listen on. Loopback by default; any other address needs at least one key "
            "(`persyn web keys create`) or `persyn run` refuses to start."
        ),
    )
    port: int = Field(default=8765, ge=0, le=65535, description="TCP port to listen on (0: any free port).")
    max_body_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="Larger request bodies are refused with 413 (the message itself is also held to [conversation] max_message_chars).",
    )
    max_upload_bytes: int | None = Field(
        default=None,
        ge=1024,
        le=1_024 * 1_048_576,
        description=(
            "The body limit of the routes that take files (`/v1/chat/completions`, `POST "
            "/v1/agents/{agent}/events`), which carry them base64 (4/3 of their size); every other "
            "route keeps max_body_bytes. Unset: the largest [senses] per-kind byte limit × 4/3 plus "
            "max_body_bytes (about 34 MiB with the defaults: a 25 MB voice note fits)."
        ),
        examples=[8 * 1_048_576],
    )
    cors_origins: list[str] = Field(
        default_factory=list[str],
        description=(
            "Browser origins allowed to call the API from other sites (empty: CORS off). `*` (any site) "
            "while an operator key exists is a failure in `persyn doctor`."
        ),
        examples=[["https://chat.example.org"]],
    )
    sse_buffer: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="Live events queued per stream client; a client that falls this far behind is dropped.",
    )
    request_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description=(
            "How long a client may take to send a request's head, and then its body; a slower one "
            "is cut off (408), so clients that trickle bytes cannot hold the server's connections."
        ),
    )
    reply_timeout_seconds: float = Field(
        default=300.0, gt=0, le=3600, description="How long a chat completion waits for the agent's turn."
    )

    @field_validator("host")
    @classmethod
    def _host_has_no_scheme(cls, value: str) -> str:
        if "/" in value or " " in value:
            raise ValueError(f"invalid host {value!r}: give an address such as 127.0.0.1 or 0.0.0.0")
        return value
