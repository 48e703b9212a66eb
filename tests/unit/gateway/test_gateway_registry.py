"""Model strings → specs: every accepted form, `auto`, and the errors for everything else."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from persyn.core.config import Secrets, Task
from persyn.core.errors import ModelError
from persyn.gateway.registry import AUTO_MODELS, ModelSpec, Tier, model_tier, parse_model_string

ANTHROPIC = Secrets(anthropic_api_key=SecretStr("sk-ant"))
OPENAI = Secrets(openai_api_key=SecretStr("sk-oai"))
BOTH = Secrets(anthropic_api_key=SecretStr("sk-ant"), openai_api_key=SecretStr("sk-oai"))
NONE = Secrets()


@pytest.mark.parametrize(
    ("raw", "secrets", "expected"),
    [
        ("anthropic:claude-haiku-4-5", ANTHROPIC, ModelSpec(provider="anthropic", name="claude-haiku-4-5")),
        ("openai:gpt-4.1", OPENAI, ModelSpec(provider="openai", name="gpt-4.1")),
        (
            "openai:llama3@http://localhost:11434/v1",
            NONE,
            ModelSpec(provider="openai", name="llama3", base_url="http://localhost:11434/v1"),
        ),
        (
            " openai:qwen@http://10.0.0.5:8000/v1/ ",
            NONE,
            ModelSpec(provider="openai", name="qwen", base_url="http://10.0.0.5:8000/v1"),
        ),
        ("local:", NONE, ModelSpec(provider="local", name="")),
        ("local:/models/gemma.gguf", NONE, ModelSpec(provider="local", name="/models/gemma.gguf")),
        ("test:echo", NONE, ModelSpec(provider="test", name="echo")),
        (
            "test:script@/tmp/rules.json",
            NONE,
            ModelSpec(provider="test", name="script", script="/tmp/rules.json"),
        ),
    ],
)
def test_accepted_forms(raw: str, secrets: Secrets, expected: ModelSpec) -> None:
    assert parse_model_string(raw, secrets) == expected


@pytest.mark.parametrize(
    ("raw", "hosting"),
    [
        ("anthropic:claude-haiku-4-5", "hosted"),
        ("openai:gpt-4.1", "hosted"),
        ("openai:llama3@http://127.0.0.1:11434/v1", "local"),
        ("openai:llama3@http://192.168.1.20:8080/v1", "local"),
        ("openai:llama3@https://api.together.xyz/v1", "hosted"),
        ("local:", "local"),
        ("test:echo", "test"),
    ],
)
def test_hosting_tells_operator_run_servers_from_hosted_ones(raw: str, hosting: str) -> None:
    assert parse_model_string(raw, BOTH).hosting == hosting


@pytest.mark.parametrize(
    ("raw", "tier"),
    [
        ("anthropic:claude-haiku-4-5", "cheap"),
        ("anthropic:claude-sonnet-4-6", "strong"),
        ("anthropic:claude-opus-4-1", "strong"),
        ("openai:gpt-4.1", "strong"),
        ("openai:gpt-4.1-mini", "cheap"),
        ("openai:gpt-5-nano", "cheap"),
        ("openai:gemini-2.5-flash@http://127.0.0.1:8080/v1", "cheap"),
        ("local:", "cheap"),  # the bundled Gemma 3 270M
        ("openai:llama3@http://127.0.0.1:11434/v1", "strong"),  # unknown: never hidden among the cheap
        ("test:echo", "strong"),
    ],
)
def test_the_counters_tier_is_strong_or_cheap_inferred_for_known_models(raw: str, tier: str) -> None:
    assert model_tier(parse_model_string(raw, BOTH), {}) == tier


def test_a_configured_tier_wins_over_the_inference() -> None:
    llama = parse_model_string("openai:llama3@http://127.0.0.1:11434/v1", BOTH)
    haiku = parse_model_string("anthropic:claude-haiku-4-5", BOTH)
    configured: dict[str, Tier] = {str(llama): "cheap", str(haiku): "strong"}
    assert (model_tier(llama, configured), model_tier(haiku, configured)) == ("cheap", "strong")
    assert model_tier(parse_model_string("openai:gpt-4.1-mini", BOTH), configured) == "cheap"


def test_canonical_string_round_trips() -> None:
    for raw in ("openai:llama3@http://localhost:11434/v1", "test:script@/tmp/r.json", "anthropic:claude-x"):
        spec = parse_model_string(raw, BOTH)
        assert str(spec) == raw
        assert parse_model_string(str(spec), BOTH) == spec


def test_specs_are_frozen_and_hashable() -> None:
    spec = parse_model_string("test:echo", NONE)
    assert {spec: 1}[ModelSpec(provider="test", name="echo")] == 1
    with pytest.raises(ValueError, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


def test_auto_prefers_anthropic_strong_for_reasoning_and_cheap_for_the_rest() -> None:
    strong, cheap = AUTO_MODELS["anthropic"]
    for task in (Task.RESPOND, Task.CRITIQUE, Task.REFINE, Task.REFLECT):
        assert parse_model_string("auto", BOTH, task) == ModelSpec(provider="anthropic", name=strong)
    for task in (Task.DECIDE, Task.SUMMARIZE, Task.RATE, Task.CLASSIFY, Task.EXTRACT, Task.DOSSIER):
        assert parse_model_string("auto", BOTH, task) == ModelSpec(provider="anthropic", name=cheap)
    assert "haiku" in cheap
    assert parse_model_string("auto", BOTH) == ModelSpec(provider="anthropic", name=strong)


def test_auto_falls_back_to_openai_then_local() -> None:
    strong, cheap = AUTO_MODELS["openai"]
    assert parse_model_string("auto", OPENAI, Task.RESPOND) == ModelSpec(provider="openai", name=strong)
    assert parse_model_string("auto", OPENAI, Task.SUMMARIZE) == ModelSpec(provider="openai", name=cheap)
    assert parse_model_string("auto", NONE, Task.RESPOND) == ModelSpec(provider="local", name="")
    assert parse_model_string("auto", Secrets(anthropic_api_key=SecretStr(""))) == ModelSpec(
        provider="local", name=""
    )


@pytest.mark.parametrize(
    "raw",
    [
        "gpt-4",
        "mistral:large",
        "openai:",
        "anthropic:@http://x",
        "openai:x@ftp://host/v1",
        "test:",
        "test:script",
    ],
)
def test_unknown_strings_name_the_string_and_list_accepted_forms(raw: str) -> None:
    with pytest.raises(ModelError) as caught:
        parse_model_string(raw, BOTH)
    message = str(caught.value)
    assert repr(raw) in message
    for form in ("auto", "anthropic:NAME", "openai:NAME@http://host:port/v1", "local:", "test:NAME"):
        assert form in message


@pytest.mark.parametrize(
    ("raw", "variable"),
    [("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-4.1", "OPENAI_API_KEY")],
)
def test_hosted_provider_without_its_key_names_the_variable(raw: str, variable: str) -> None:
    with pytest.raises(ModelError, match=variable):
        parse_model_string(raw, NONE)


def test_a_custom_server_needs_no_key() -> None:
    assert (
        parse_model_string("openai:llama3@http://localhost:8080/v1", NONE).base_url
        == "http://localhost:8080/v1"
    )


def test_every_provider_registers_through_one_registry() -> None:
    from persyn.gateway.providers import registered_providers

    # `test` is the doubles' entry point (pyproject.toml): the gateway never imports them.
    assert {"anthropic", "openai", "local", "test"} <= set(registered_providers())
