"""Email's `[channels.email]` section and its secrets (`EMAIL_IMAP_PASSWORD`,
`EMAIL_SMTP_PASSWORD`), declared under the `persyn.channel_settings` entry points: `Settings`
validates it with the rest of the file (`core/config/chat.py`). Imports its base and pydantic
only, never the adapter. Each key's description is its documentation (the starter file, the
README's table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from persyn.core.section import ChannelSection

__all__ = ["EmailConfig"]

ImapSecurity = Literal["tls", "none"]
SmtpSecurity = Literal["tls", "starttls", "none"]


class EmailConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {
        "email_imap_password": "EMAIL_IMAP_PASSWORD",
        "email_smtp_password": "EMAIL_SMTP_PASSWORD",
    }

    enabled: bool = Field(
        default=False,
        description="Serve an agent by email: IMAP (IDLE, polling as fallback) in, SMTP submission out.",
    )
    agent: str | None = Field(
        default=None,
        description="Name of the agent that owns the mailbox; unset = the only (or first) agent.",
        examples=["Ada"],
    )
    address: str = Field(
        default="",
        description="The agent's own address: the From of every mail it sends (required when enabled).",
        examples=["ada@example.org"],
    )
    imap_host: str = Field(default="", description="IMAP server host name.", examples=["imap.example.org"])
    imap_port: int = Field(default=993, ge=1, le=65535, description="IMAP server port (993 TLS, 143 plain).")
    imap_security: ImapSecurity = Field(
        default="tls", description='"tls" (implicit TLS), or "none" (loopback and tests only).'
    )
    imap_user: str = Field(
        default="", description="IMAP login; the password comes from EMAIL_IMAP_PASSWORD (unset = address)."
    )
    mailbox: str = Field(default="INBOX", min_length=1, description="The IMAP mailbox read for new mail.")
    smtp_host: str = Field(
        default="", description="SMTP submission host name.", examples=["smtp.example.org"]
    )
    smtp_port: int = Field(default=587, ge=1, le=65535, description="SMTP submission port (587, or 465 TLS).")
    smtp_security: SmtpSecurity = Field(
        default="starttls", description='"starttls" (587), "tls" (implicit, 465), or "none" (loopback only).'
    )
    smtp_user: str = Field(
        default="",
        description="SMTP login; the password comes from EMAIL_SMTP_PASSWORD (unset: the IMAP one). Empty: no AUTH.",
    )
    allow: list[str] = Field(
        default_factory=list,
        description="Addresses (or @domain) answered besides the directory's email identities; all other senders are recorded and ignored.",
        examples=[["bo@example.org", "@example.org"]],
    )
    idle: bool = Field(
        default=True, description="Wait for new mail with IMAP IDLE when the server offers it."
    )
    poll_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="How often the mailbox is checked without IDLE, and the longest one IDLE waits.",
    )

    @field_validator("allow")
    @classmethod
    def _addresses(cls, allow: list[str]) -> list[str]:
        for entry in allow:
            if "@" not in entry or any(c.isspace() for c in entry):
                raise ValueError(f"{entry!r} is not an address or @domain")
        return [entry.strip().lower() for entry in allow]

    @field_validator("address")
    @classmethod
    def _address(cls, address: str) -> str:
        if address and ("@" not in address or any(c.isspace() or c in '<>,"' for c in address)):
            raise ValueError(f"{address!r} is not a bare email address")
        return address.strip()
