"""Model strings → model specs (ARCHITECTURE §5).

Configuration names a task's model with a string (or a list of them, a fallback chain); this
module is the only place such a string is parsed, so every accepted form, and the error for
everything else, lives here (which code builds each provider's model: `gateway/providers.py`):

- `anthropic:NAME` (optionally `anthropic:NAME@URL` for an Anthropic-compatible proxy)
- `openai:NAME`, or `openai:NAME@http://host:port/v1` for any OpenAI-compatible server
  (Ollama, vLLM, llama.cpp's server)
- `local:` / `local:PATH` — llama.cpp on this machine, built by an injected factory
- `test:NAME` / `test:script@/abs/path.json` — the deterministic doubles of `persyn.testing`
- `auto` — a hosted model when an API key is set (a strong one for the reasoning tasks, a cheap
  one for the rest), else the bundled local model. A process resolves `auto` once when it starts
  (`gateway/auto.py`), and a local OpenAI-compatible server it finds replaces `auto` in the
  settings before this module sees it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

from persyn.core.config import AgentConfig, Secrets, Settings, Task
from persyn.core.errors import ModelError

__all__ = [
    "ACCEPTED_FORMS",
    "AUTO_MODELS",
    "STRONG_TASKS",
    "Hosting",
    "ModelSpec",
    "Provider",
    "Tier",
    "context_window_for",
    "model_tier",
    "parse_model_string",
]

Provider = Literal["anthropic", "openai", "local", "test"]
Hosting = Literal["local", "hosted", "test"]
Tier = Literal["strong", "cheap"]
# Model names that mark a provider's fast, cheap line (SPEC App. C: "cheap/fast vs strong").
_CHEAP_MARKERS = ("haiku", "mini", "nano", "flash", "lite")

ACCEPTED_FORMS = (
    "auto",
    "anthropic:NAME",
    "openai:NAME",
    "openai:NAME@http://host:port/v1",
    "local:",
    "local:PATH.gguf",
    "test:NAME",
    "test:script@/abs/path.json",
)

# SPEC §3: a strong model reasons, critiques and revises; a fast cheap one does the rest.
STRONG_TASKS = frozenset({Task.RESPOND, Task.CRITIQUE, Task.REFINE, Task.REFLECT, Task.SANDBOX})

# What `auto` resolves to per provider: (strong, cheap). Operators who want other models
# name them explicitly in [models]; these are only the zero-configuration defaults.
AUTO_MODELS: dict[Literal["anthropic", "openai"], tuple[str, str]] = {
    "anthropic": ("claude-sonnet-4-6", "claude-haiku-4-5"),
    "openai": ("gpt-4.1", "gpt-4.1-mini"),
}

_KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class ModelSpec(BaseModel):
    """A parsed model string: which provider, which model, and where to reach it.

    Frozen and hashable so callers can group tasks by the model they run on and the
    gateway can cache one built model per spec.
    """

    model_config = ConfigDict(frozen=True)

    provider: Provider
    name: str
    base_url: str | None = None
    # `test:script@PATH` only: the JSON rules file the scripted double reads.
    script: str | None = None

    @property
    def bundled(self) -> bool:
        """The bundled tiny model (Gemma 3 270M, `local:`): too small to critique or to call
        tools, so it gets neither (`[deliberation] offline_model` aside)."""
        return self.provider == "local" and not self.name

    @property
    def hosting(self) -> Hosting:
        """Where the model runs. An OpenAI-compatible server on loopback or a private network
        is operator-run, so it counts as "local"; anything else reached over the network is
        "hosted"."""
        if self.provider == "test":
            return "test"
        if self.provider == "local":
            return "local"
        if self.base_url is not None and _is_private_host(self.base_url):
            return "local"
        return "hosted"

    def __hash__(self) -> int:
        # Spelled out because type checkers do not see the hash pydantic adds to frozen models.
        return hash((self.provider, self.name, self.base_url, self.script))

    def __str__(self) -> str:
        """The canonical model string: what usage records and the price table use."""
        if self.provider == "test" and self.script is not None:
            return f"test:{self.name}@{self.script}"
        text = f"{self.provider}:{self.name}"
        return f"{text}@{self.base_url}" if self.base_url else text


def model_tier(spec: ModelSpec, configured: Mapping[str, Tier]) -> Tier:
    """The counters' model tier (SPEC App. C: the strong-vs-cheap split): as `[models] tiers`
    names it for the model string, else inferred from known names (a provider's haiku, mini,
    nano, flash and lite lines, and the bundled tiny model, are cheap). An unknown model is
    counted as strong, so spend on it never hides among the cheap calls."""
    named = configured.get(str(spec))
    if named is not None:
        return named
    if spec.bundled:
        return "cheap"
    name = spec.name.lower()
    return "cheap" if any(marker in name for marker in _CHEAP_MARKERS) else "strong"


def parse_model_string(raw: str, secrets: Secrets, task: Task | None = None) -> ModelSpec:
    """Parse one configured model string.

    `task` only matters for `auto`, which picks a strong or a cheap model by task (a strong
    one when no task is given). A hosted provider without its API key (and without a custom
    base URL, which may not need one) is an error naming the variable to set.
    """
    text = raw.strip()
    if text == "auto":
        return _resolve_auto(secrets, task)
    provider, sep, rest = text.partition(":")
    if not sep:
        raise _bad_string(raw)
    if provider == "local":
        return ModelSpec(provider="local", name=rest.strip())
    if provider == "test":
        return _parse_test(raw, rest)
    if provider in ("anthropic", "openai"):
        name, at, url = rest.partition("@")
        name = name.strip()
        if not name:
            raise _bad_string(raw, "the model name is missing")
        base_url = _parse_url(raw, url.strip()) if at else None
        spec = ModelSpec(provider=provider, name=name, base_url=base_url)
        if base_url is None:
            _require_key(spec, secrets)
        return spec
    raise _bad_string(raw, f"unknown provider {provider!r}")


def _resolve_auto(secrets: Secrets, task: Task | None) -> ModelSpec:
    strong = task is None or task in STRONG_TASKS
    hosted: tuple[tuple[Literal["anthropic", "openai"], SecretStr | None], ...] = (
        ("anthropic", secrets.anthropic_api_key),
        ("openai", secrets.openai_api_key),
    )
    for provider, key in hosted:
        if key is not None and key.get_secret_value():
            strong_name, cheap_name = AUTO_MODELS[provider]
            return ModelSpec(provider=provider, name=strong_name if strong else cheap_name)
    return ModelSpec(provider="local", name="")


def _parse_test(raw: str, rest: str) -> ModelSpec:
    name, at, path = rest.partition("@")
    name = name.strip()
    if not name:
        raise _bad_string(raw, "the double's name is missing")
    if name == "script":
        path = path.strip()
        if not at or not path:
            raise _bad_string(raw, "the scripted double needs a rules file: test:script@/abs/path.json")
        return ModelSpec(provider="test", name="script", script=path)
    if at:
        raise _bad_string(raw, f"only test:script takes a path, not test:{name}")
    return ModelSpec(provider="test", name=name)


def _parse_url(raw: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad_string(raw, f"the server address {url!r} is not an http(s) URL")
    return url.rstrip("/")


def _require_key(spec: ModelSpec, secrets: Secrets) -> None:
    key = secrets.anthropic_api_key if spec.provider == "anthropic" else secrets.openai_api_key
    if key is None or not key.get_secret_value():
        variable = _KEY_VARIABLES[spec.provider]
        raise ModelError(
            f"model {str(spec)!r} needs an API key: set {variable} in the environment "
            f"(or choose another model in [models], e.g. 'auto' or 'local:')"
        )


def _is_private_host(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith((".local", ".localhost", ".internal", ".lan")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _bad_string(raw: str, reason: str | None = None) -> ModelError:
    why = f" ({reason})" if reason else ""
    forms = ", ".join(ACCEPTED_FORMS)
    return ModelError(f"invalid model string {raw!r}{why}; accepted forms: {forms}")


_LOCAL_WINDOW = 4_096


def context_window_for(settings: Settings, agent: AgentConfig) -> int:
    """Tokens the respond model can take: `[models] context_window`, else the smallest known
    window of the respond chain, since any link of it may serve the turn (a conservative
    value per provider; the local server runs with a 4096-token window)."""
    if settings.models.context_window:
        return settings.models.context_window
    return min(_known_window(raw, settings.secrets) for raw in settings.models_for(agent, Task.RESPOND))


def _known_window(model: str, secrets: Secrets) -> int:
    model = model.strip()
    if model == "auto":
        hosted = secrets.anthropic_api_key or secrets.openai_api_key
        return 128_000 if hosted else _LOCAL_WINDOW
    provider = model.split(":", 1)[0]
    if provider == "anthropic":
        return 200_000
    if provider == "openai":
        return 8_192 if "@" in model else 128_000
    if provider == "local":
        return _LOCAL_WINDOW
    return 8_192
