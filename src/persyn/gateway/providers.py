"""The provider registry (ARCHITECTURE §5): model spec → pydantic-ai model, one entry per provider.

`anthropic`, `openai` and `local` register here; any other provider (the deterministic doubles
of `persyn.testing` are one) registers like a plugin, through the `persyn.model_providers`
entry-point group of its distribution, loaded the first time a spec names it. So the gateway
never imports the test doubles, and nothing in production does unless a `test:` model is
configured.

Each builder returns the provider's model with everything that differs between providers set
on it once, when it is built: the output mode for structured output in its profile
(`default_structured_output_mode`: an output tool for Claude and the doubles, a JSON-schema
response format for OpenAI, prompted JSON for the local llama.cpp server), the reply bound in
its settings (`max_tokens`), its timeout, and the SDK's own retries switched off (the gateway
retries, `gateway/wrappers/`). The gateway only says "structured output, this schema"
(`output_mode='auto'`) and pydantic-ai resolves it from the profile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from pydantic_ai.models import Model

from persyn.core.config import ModelsConfig, Secrets
from persyn.core.errors import ModelError
from persyn.gateway.registry import ModelSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "BuildContext",
    "LocalModelFactory",
    "ProviderBuilder",
    "build_model",
    "register_provider",
    "registered_providers",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "persyn.model_providers"

LocalModelFactory = Callable[[ModelSpec], Model]


@dataclass(frozen=True)
class BuildContext:
    """What a builder may read: the `[models]` settings, the secrets, and the runtime's local
    model server (None in a process that does not run one)."""

    models: ModelsConfig
    secrets: Secrets
    local_factory: LocalModelFactory | None = None


ProviderBuilder = Callable[[ModelSpec, BuildContext], Model]

_builders: dict[str, ProviderBuilder] = {}
_plugins_loaded = False


def register_provider(name: str, builder: ProviderBuilder, *, replace: bool = False) -> None:
    """Make specs of provider `name` build with `builder` in this process."""
    if name in _builders and not replace:
        raise ValueError(f"a model provider named {name!r} is already registered")
    _builders[name] = builder


def registered_providers() -> tuple[str, ...]:
    _load_plugins()
    return tuple(sorted(_builders))


def build_model(spec: ModelSpec, context: BuildContext) -> Model:
    """The model `spec` names, built by its provider's registered builder."""
    builder = _builders.get(spec.provider)
    if builder is None:
        _load_plugins()
        builder = _builders.get(spec.provider)
    if builder is None:
        known = ", ".join(sorted(_builders))
        raise ModelError(
            f"no model provider {spec.provider!r} is registered for {str(spec)!r} (registered: {known}); "
            f"providers outside the gateway register through the {ENTRY_POINT_GROUP!r} entry points of "
            "their package (reinstall it, e.g. `uv sync`, if its metadata predates them)"
        )
    return builder(spec, context)


def _load_plugins() -> None:
    """Register every provider a distribution declares (once per process). A plugin that fails
    to load is logged and skipped: the providers that did load still work."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _builders:
            continue
        try:
            builder: ProviderBuilder = point.load()
        except Exception:
            log.warning(
                "model provider plugin %r (%s) failed to load", point.name, point.value, exc_info=True
            )
            continue
        _builders[point.name] = builder


# built-in providers -----------------------------------------------------------------------
# Provider SDKs are imported on first use: together they cost seconds of start-up.
def _anthropic(spec: ModelSpec, context: BuildContext) -> Model:
    from persyn.gateway.anthropic import build_anthropic_model

    key = context.secrets.anthropic_api_key
    api_key = key.get_secret_value() if key is not None else None
    models = context.models
    return build_anthropic_model(
        spec.name, spec.base_url, api_key, models.request_timeout_seconds, models.max_output_tokens
    )


def _openai(spec: ModelSpec, context: BuildContext) -> Model:
    from persyn.gateway.openai import build_openai_model

    key = context.secrets.openai_api_key
    # A custom server gets no OpenAI key: it would leak the key to a third party.
    api_key = key.get_secret_value() if key is not None and spec.base_url is None else None
    models = context.models
    return build_openai_model(
        spec.name, spec.base_url, api_key, models.request_timeout_seconds, models.max_output_tokens
    )


def _local(spec: ModelSpec, context: BuildContext) -> Model:
    """The runtime serves `local:` models (llama.cpp in a child process, `gateway/local.py`) and
    builds them with `openai.build_local_model`; a process without it cannot run them."""
    if context.local_factory is None:
        raise ModelError(
            f"model {str(spec)!r} needs the local model server, which is not running in this process"
        )
    return context.local_factory(spec)


register_provider("anthropic", _anthropic)
register_provider("openai", _openai)
register_provider("local", _local)
