"""The configuration of tools that reach outside the agent (SPEC §4.6): `[mcp]` and its
`[[mcp.servers]]` (`core/config/settings.py` composes it into `Settings`).

An MCP server's tools are offered to the model as `<server>__<tool>`; the server's name is
therefore restricted to what every provider accepts in a function name and never holds `__`
itself, so the first `__` of a tool name always ends the server's part.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from persyn.core.section import Section

__all__ = ["MCP_SEPARATOR", "McpConfig", "McpServerConfig"]

MCP_SEPARATOR = "__"
_SERVER_NAME = re.compile(r"[a-z][a-z0-9-]{0,23}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class McpServerConfig(Section):
    """One MCP server: a command started over stdio, or a streamable-HTTP `url`."""

    name: str = Field(
        description=(
            "The server's name (1 to 24 lowercase letters, digits or '-', starting with a letter): "
            "its tools are offered as NAME__TOOL."
        ),
        examples=["everything"],
    )
    command: str | None = Field(
        default=None,
        description="The program to start for a stdio server (exactly one of command and url).",
        examples=["npx"],
    )
    args: list[str] = Field(default_factory=list[str], description="The stdio server's arguments.")
    env: dict[str, str] = Field(
        default_factory=dict[str, str],
        description="Extra environment variables for the stdio server (added to a minimal safe set).",
    )
    url: str | None = Field(
        default=None,
        description="The endpoint of a streamable-HTTP server (exactly one of command and url).",
        examples=["http://127.0.0.1:3001/mcp"],
    )
    headers: dict[str, str] = Field(
        default_factory=dict[str, str],
        description=(
            "HTTP headers sent to a url server, each mapped to the NAME of the environment variable "
            'that holds its value, e.g. { Authorization = "MCP_TOKEN" } (secrets stay out of this file).'
        ),
    )
    include: list[str] = Field(
        default_factory=list[str],
        description="Offer only these of the server's tools (by the server's own names); empty = all.",
    )
    exclude: list[str] = Field(
        default_factory=list[str], description="Never offer these of the server's tools."
    )
    timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="A call to this server still unanswered after this long fails.",
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _SERVER_NAME.fullmatch(value) or MCP_SEPARATOR in value:
            raise ValueError(
                f"{value!r} is not a valid MCP server name: use 1 to 24 lowercase letters, digits or '-', "
                "starting with a letter"
            )
        return value

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for header, variable in value.items():
            if not _HEADER_NAME.fullmatch(header):
                raise ValueError(f"{header!r} is not an HTTP header name")
            if not _ENV_NAME.fullmatch(variable):
                raise ValueError(
                    f"header {header!r} names {variable!r}, which is not an environment variable name "
                    "(the value comes from the environment, never from this file)"
                )
        return value

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of command (stdio) and url (HTTP)")
        if self.url is not None and (self.args or self.env):
            raise ValueError(f"MCP server {self.name!r} has a url: args and env are for a stdio command")
        if self.command is not None and self.headers:
            raise ValueError(f"MCP server {self.name!r} is a stdio command: headers are for a url")
        both = sorted(set(self.include) & set(self.exclude))
        if both:
            raise ValueError(f"MCP server {self.name!r} both includes and excludes {both!r}")
        return self


class McpConfig(Section):
    """MCP servers whose tools the agents are offered (SPEC §4.6). Off until a server is
    configured: each is a `[[mcp.servers]]` table (keys below). A server that cannot be reached
    at start-up is reported by `persyn doctor` and contributes no tools; a connection that drops
    is re-established on the next call."""

    servers: list[McpServerConfig] = Field(
        default_factory=list[McpServerConfig],
        description="The MCP servers, one [[mcp.servers]] table each (its keys are listed below).",
    )
    connect_timeout_seconds: float = Field(
        default=15.0,
        gt=0,
        le=600,
        description="Start-up waits at most this long for the servers; one not connected by then has no tools.",
    )
    reconnect_attempts: int = Field(
        default=2,
        ge=0,
        le=10,
        description="A call whose connection dropped reconnects and is retried this many times, then fails.",
    )
    max_result_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=256 * 1_048_576,
        description=(
            "Largest message a server may send (a tool's result, a page of its tool list), counted as it "
            "arrives: past it the call fails, the result is dropped and the server is restarted."
        ),
    )

    @field_validator("servers")
    @classmethod
    def _unique_names(cls, value: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [server.name for server in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"MCP server names must be unique; repeated: {repeated!r}")
        return value
