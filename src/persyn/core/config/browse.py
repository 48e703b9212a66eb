"""The configuration of the tools that read the world (SPEC §4.6): `[browse]` (web search and
reading a URL), `[reference]` (offline ZIM archives) `[skills]` (Agent Skills folders)
and `[images]` (an image generation API).
Composed into `Settings` by `core/config.py`; every key's description is its documentation.

Search and reading are off until configured; the search provider's key is read from the
environment variable `[browse] search_key_env` names (secrets stay out of the file).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from persyn.core.config.models import Section

__all__ = ["AUTHORING_SKILL", "BrowseConfig", "ImagesConfig", "ReferenceConfig", "SkillsConfig"]

AUTHORING_SKILL = "skill-authoring"  # ships with persyn, protected
_DOMAIN = re.compile(r"(?:\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_SKILL_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


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


class SkillsConfig(Section):
    """Agent Skills (folders with a SKILL.md): named in the prompt, loaded when used."""

    enabled: bool = Field(default=True, description="Offer skills (`use_skill`, `write_skill`).")
    directories: list[str] = Field(
        default_factory=lambda: ["skills"],
        description=(
            "Deployment-wide skill directories, each holding one folder per skill (relative paths are "
            "under the deployment directory)."
        ),
    )
    agent_directories: dict[str, list[str]] = Field(
        default_factory=dict[str, list[str]],
        description="Further skill directories per agent, by agent name, e.g. { Ada = ['skills-ada'] }.",
    )
    protected: list[str] = Field(
        default_factory=lambda: [AUTHORING_SKILL],
        description=(
            "Skills that may be used but not changed: an edit or deletion is undone (the version first "
            "seen is restored) and recorded."
        ),
    )
    write: bool = Field(
        default=True,
        description="Offer `write_skill`: the agent may author new skills (into data/skills/AGENT_ID).",
    )
    max_file_chars: int = Field(
        default=20_000, ge=500, le=1_000_000, description="Longest skill file the agent is shown."
    )
    catalogue_chars: int = Field(
        default=3000,
        ge=500,
        le=100_000,
        description=(
            "About how many characters the list of skills in the prompt may take; past it each "
            "description is shortened to an equal share (names are always listed)."
        ),
    )

    @field_validator("protected")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _SKILL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a skill name (lowercase letters, digits, single hyphens)")
        return value


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
