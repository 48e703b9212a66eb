"""OpenAI and OpenAI-compatible servers (Ollama, vLLM, llama.cpp's server) as pydantic-ai models.

One builder serves hosted OpenAI and any `openai:NAME@URL` server, another the `local:`
llama.cpp server, so every OpenAI-shaped backend gets the same streaming, tool-call and usage
handling from pydantic-ai's `OpenAIChatModel`. What differs is set in the model's profile and
settings when it is built:

- hosted OpenAI: structured output as a JSON-schema response format (`native`); the reply bound
  goes out as `max_completion_tokens`;
- a custom server: the same, but the bound goes out as `max_tokens` (llama.cpp's server and older
  vLLM / Ollama ignore the newer field), and a server that cannot serve JSON-schema response
  formats (llama-cpp-python's) is asked for a `json_object` with the schema instead, from then
  on (`CompatibleChatModel`);
- the `local:` server (llama-cpp-python's, `gateway/local.py`): `json_object` with the schema,
  which it enforces with a grammar, from the start; and the local reply bound.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIChatModelSettings
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from persyn.core.errors import ModelError

__all__ = ["PLACEHOLDER_API_KEY", "CompatibleChatModel", "build_local_model", "build_openai_model"]

log = logging.getLogger(__name__)

# Local OpenAI-compatible servers ignore the key, but the OpenAI SDK refuses to start without one.
PLACEHOLDER_API_KEY = "persyn-no-key"
_RATE_LIMITED = 429  # not a refusal of the request's form: retried as it is


class CompatibleChatModel(OpenAIChatModel):
    """An OpenAI-compatible server: prompted structured output goes out as llama.cpp's
    `json_object` response format *with the schema* (which it turns into a grammar), and a
    server that cannot serve a JSON-schema response format is asked that way from then on.

    Which servers cannot is learnt by trying, not read from their error text: a structured
    request that failed with an HTTP error (llama-cpp-python answers 500; others 400 or 422)
    is sent once more in the prompted mode, and only when that one succeeds does the model
    switch. When it fails too, the first error is raised (and retried as usual when it is
    transient), so an unrelated refusal switches nothing. Only non-streamed requests learn it:
    the gateway never streams structured output."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json_object_only = False

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        params = model_request_parameters
        structured = params.output_mode == "auto" and params.output_object is not None
        if not structured or self.profile.get("default_structured_output_mode") != "native":
            return await super().request(messages, model_settings, params)
        prompted = params.with_default_output_mode("prompted")
        if self.json_object_only:
            return await super().request(messages, model_settings, prompted)
        try:
            return await super().request(messages, model_settings, params)
        except ModelHTTPError as exc:
            if exc.status_code == _RATE_LIMITED:
                raise
            try:
                response = await super().request(messages, model_settings, prompted)
            except Exception:
                raise exc from None
            log.info(
                "model %s failed a JSON-schema response format (HTTP %d) but serves json_object with a "
                "schema: using that from now on",
                self.model_name,
                exc.status_code,
            )
            self.json_object_only = True
            return response

    def prepare_request(
        self, model_settings: ModelSettings | None, model_request_parameters: ModelRequestParameters
    ) -> tuple[ModelSettings | None, ModelRequestParameters]:
        settings, params = super().prepare_request(model_settings, model_request_parameters)
        if params.output_mode == "prompted" and params.output_object is not None:
            merged = cast(dict[str, Any], dict(settings or {}))
            extra = cast(dict[str, Any], merged.get("extra_body") or {})
            response_format = {"type": "json_object", "schema": params.output_object.json_schema}
            merged["extra_body"] = {**extra, "response_format": response_format}
            settings = cast(ModelSettings, merged)
        return settings, params


def build_openai_model(
    name: str, base_url: str | None, api_key: str | None, timeout: float, max_tokens: int = 2048
) -> Model:
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
    settings = _settings(timeout, max_tokens)
    profile = _profile(hosted=base_url is None, mode="native")
    if base_url is None:
        return OpenAIChatModel(name, provider=provider, profile=profile, settings=settings)
    return CompatibleChatModel(name, provider=provider, profile=profile, settings=settings)


def build_local_model(name: str, base_url: str, timeout: float, max_tokens: int) -> Model:
    """The `local:` llama.cpp server (llama-cpp-python's, which knows no JSON-schema response
    format): structured output as `json_object` with the schema; `max_tokens` is the local
    reply bound (a tiny model otherwise rambles for minutes)."""
    provider = OpenAIProvider(base_url=base_url, api_key=PLACEHOLDER_API_KEY)
    profile = _profile(hosted=False, mode="prompted")
    profile["supports_image_input"] = False  # the bundled text-only model
    return CompatibleChatModel(
        name, provider=provider, profile=profile, settings=_settings(timeout, max_tokens)
    )


def _settings(timeout: float, max_tokens: int) -> OpenAIChatModelSettings:
    return OpenAIChatModelSettings(
        timeout=timeout,
        max_tokens=max_tokens,
        max_retries=0,
        # Persyn never sends mid-conversation system messages: no lookalike-tag notice needed.
        framing_announcement="never",
    )


def _profile(*, hosted: bool, mode: str) -> OpenAIModelProfile:
    # The reply bound goes out as `max_completion_tokens` to OpenAI, but as `max_tokens` to a
    # custom server: llama.cpp's server (and older vLLM / Ollama) ignore the newer field, and
    # an unbounded tiny model rambles for minutes.
    return OpenAIModelProfile(
        default_structured_output_mode="native" if mode == "native" else "prompted",
        openai_chat_supports_multiple_system_messages=False,
        openai_chat_supports_max_completion_tokens=hosted,
    )
