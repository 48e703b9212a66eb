"""Anthropic's Messages API as a pydantic-ai model, with explicit prompt caching switched on.

SPEC §4 step 3 orders the system instruction stable-first so a provider that caches a stable
prefix can reuse it. Anthropic only caches up to explicit breakpoints, so this model's default
settings ask pydantic-ai to place one after the static instruction part (the gateway sends the
stable prefix as a static `InstructionPart`, the volatile rest as a dynamic one) and one on the
last tool definition.
"""

from __future__ import annotations

from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.providers.anthropic import AnthropicProvider

from persyn.core.errors import ModelError

__all__ = ["build_anthropic_model"]

# An Anthropic-compatible proxy at a custom base URL may not need a key; the SDK wants one anyway.
_PLACEHOLDER_API_KEY = "persyn-no-key"


def build_anthropic_model(
    name: str, base_url: str | None, api_key: str | None, timeout: float, max_tokens: int = 2048
) -> Model:
    """An `AnthropicModel` for `name`; `base_url` points it at a proxy or a test server.

    The SDK's own retries are off (`max_retries=0`) because the gateway retries with its own
    backoff; cache breakpoints go on the static instructions and the tool definitions.
    Structured output is an output tool whose parameters are the schema (its profile's
    default mode), which every Claude model supports.
    """
    if api_key is None:
        if base_url is None:
            raise ModelError(
                f"model 'anthropic:{name}' needs an API key: set ANTHROPIC_API_KEY in the environment"
            )
        api_key = _PLACEHOLDER_API_KEY
    provider = AnthropicProvider(api_key=api_key, base_url=base_url)
    settings = AnthropicModelSettings(
        timeout=timeout,
        max_tokens=max_tokens,
        max_retries=0,
        # Persyn never sends mid-conversation system messages, so the lookalike-tag notice
        # pydantic-ai would prepend to the system prompt is only noise (and cache-prefix churn).
        framing_announcement="never",
        anthropic_cache_instructions=True,
        anthropic_cache_tool_definitions=True,
    )
    profile = ModelProfile(default_structured_output_mode="tool")
    return AnthropicModel(name, provider=provider, settings=settings, profile=profile)
