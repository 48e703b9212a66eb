"""`[browse]` (web search and reading a URL) and `[reference]` (offline ZIM archives): the tools
that read the world (SPEC §4.6).

Search and reading are off until configured; the search provider's key is read from the
environment variable `[browse] search_key_env` names (secrets stay out of the file). Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from persyn.core.section import Section

__all__ = ["BrowseConfig", "ReferenceConfig"]


_DOMAIN = re.compile(r"(?:\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


class BrowseConfig(Section):
    """`web_search` and `read_url`: what the agent may fetch, from where, and how much."""

    search_provider: Literal["none", "searxng", "brave"] = Field(
        default="none",
        description=(
            "Where `web_search` asks: a SearXNG instance's JSON API, or a Brave-style search API; "
            "'none' = no web_search tool."
        ),
    )
    search_url: str | None = Field(
        default=None,
        description=(
            "The provider's base URL (SearXNG: the instance, e.g. http://127.0.0.1:8888; Brave: "
            "default https://api.search.brave.com/res/v1/web/search)."
        ),
        examples=["http://127.0.0.1:8888"],
    )
    search_key_env: str = Field(
        default="BRAVE_API_KEY",
        pattern=r"[A-Za-z_][A-Za-z0-9_]*",
        description="The environment variable holding the search API's key (Brave: X-Subscription-Token).",
    )
    max_results: int = Field(default=5, ge=1, le=20, description="Search results shown per query.")
    read_url: bool = Field(
        default=False, description="Offer `read_url`: fetch a web page or PDF and read it as text."
    )
    allow_domains: list[str] = Field(
        default_factory=list[str],
        description=(
            "Fetch only from these domains (a domain covers its subdomains); empty = any public host."
        ),
    )
    deny_domains: list[str] = Field(
        default_factory=list[str], description="Never fetch from these domains (and their subdomains)."
    )
    allow_private_hosts: list[str] = Field(
        default_factory=list[str],
        description=(
            "Hosts (names or addresses) that may resolve to loopback or private addresses; any other "
            "such address is refused, so a page cannot steer the agent into the local network."
        ),
    )
    max_bytes: int = Field(
        default=5_000_000, ge=1024, le=100_000_000, description="A body larger than this is not read."
    )
    timeout_seconds: float = Field(
        default=15.0, gt=0, le=300, description="A fetch or search slower than this (in total) is given up."
    )
    max_chars: int = Field(
        default=12_000, ge=500, le=500_000, description="Longest text `read_url` returns (the rest is cut)."
    )

    @field_validator("allow_domains", "deny_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        cleaned = [d.strip().lower().rstrip(".") for d in value]
        for domain in cleaned:
            if not _DOMAIN.fullmatch(domain):
                raise ValueError(f"{domain!r} is not a domain name like 'example.org'")
        return [d.removeprefix("*.") for d in cleaned]

    @field_validator("allow_private_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [h.strip().lower().strip("[]") for h in value]

    @model_validator(mode="after")
    def _searxng_needs_url(self) -> BrowseConfig:
        if self.search_provider == "searxng" and not self.search_url:
            raise ValueError("search_provider 'searxng' needs search_url, the instance's address")
        if self.search_url is not None and not self.search_url.startswith(("http://", "https://")):
            raise ValueError(f"search_url {self.search_url!r} must be an http:// or https:// URL")
        return self


class ReferenceConfig(Section):
    """`lookup_reference`: offline ZIM archives (Kiwix) searched by title and full text."""

    archives: list[str] = Field(
        default_factory=list[str],
        description="ZIM files to search (relative paths are under the deployment directory); empty = no tool.",
    )
    max_results: int = Field(default=5, ge=1, le=20, description="Articles listed per search.")
    max_chars: int = Field(
        default=6000, ge=500, le=200_000, description="Longest article text returned (the rest is cut)."
    )
