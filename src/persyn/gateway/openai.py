"""OpenAI and OpenAI-compatible servers (Ollama, vLLM, llama.cpp's server) as pydantic-ai models.

One builder serves hosted OpenAI, any `openai:NAME@URL` server and the `local:` llama.cpp
server, so every OpenAI-shaped backend gets the same streaming, tool-call, JSON-schema and
usage handling from pydantic-ai's `OpenAIChatModel`.
"""

from __future__ import annotations

from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIChatModelSettings
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

from persyn.core.errors import ModelError

__all__ = ["PLACEHOLDER_API_KEY", "build_openai_model"]

# Local OpenAI-compatible servers ignore the key, but the OpenAI SDK refuses to start without one.
PLACEHOLDER_API_KEY = "persyn-no-key"


def build_openai_model(name: str, base_url: str | None, api_key: str | None, timeout: float) -> Model:
    """An `OpenAIChatModel` for `name`, at `base_url` when given (an OpenAI-compatible server).

    The SDK's own retries are switched off (`max_retries=0`): the gateway owns retrying, with
    its own backoff and a single usage record per successful round-trip. Leading system
    messages are merged into one, because many local chat templates (Gemma's, for one)
    reject a second system message.
    """
    if api_key is None:
        if base_url is None:
            raise ModelError(f"model 'openai:{name}' needs an API key: set OPENAI_API_KEY in the environment")
        api_key = PLACEHOLDER_API_KEY
    provider = OpenAIProvider(base_url=base_url, api_key=api_key)
    settings = OpenAIChatModelSettings(
        timeout=timeout,
        max_retries=0,
        # Persyn never sends mid-conversation system messages: no lookalike-tag notice needed.
        framing_announcement="never",
    )
    # The reply bound goes out as `max_completion_tokens` to OpenAI, but as `max_tokens` to a
    # custom server: llama.cpp's server (and older vLLM / Ollama) ignore the newer field, and
    # an unbounded tiny model rambles for minutes.
    profile = OpenAIModelProfile(
        openai_chat_supports_multiple_system_messages=False,
        openai_chat_supports_max_completion_tokens=base_url is None,
    )
    return OpenAIChatModel(name, provider=provider, profile=profile, settings=settings)
