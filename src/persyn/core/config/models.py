"""`[models]`: which model each task runs on (tasks, model strings, fallback chains), and how
model requests are made.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from persyn.core.section import Section

__all__ = [
    "AUTO_PROBE_DEFAULT",
    "PROVIDER_TOOLS",
    "ModelChoice",
    "ModelsConfig",
    "Task",
    "check_model_choice",
    "check_task_keys",
    "model_chain",
]


class Task(StrEnum):
    """What a model call is for. The registry maps each task to a model (ARCHITECTURE §5)."""

    RESPOND = "respond"
    CRITIQUE = "critique"
    REFINE = "refine"
    DECIDE = "decide"
    SUMMARIZE = "summarize"
    RATE = "rate"
    CLASSIFY = "classify"
    EXTRACT = "extract"
    DOSSIER = "dossier"
    REFLECT = "reflect"
    SANDBOX = "sandbox"
    CAPTION = "caption"
    VOICE = "voice"


ModelChoice = str | list[str]
"""Where a task's model is configured: one model string, or a fallback chain tried in order."""


def check_task_keys(value: dict[str, ModelChoice]) -> dict[str, ModelChoice]:
    allowed = {t.value for t in Task} | {"default"}
    for key in value:
        if key not in allowed:
            raise ValueError(f"unknown task {key!r}; allowed: {', '.join(sorted(allowed))}")
    return value


def check_model_choice(choice: ModelChoice | None) -> ModelChoice | None:
    """A fallback chain names at least one model and no blank one."""
    if isinstance(choice, list):
        if not choice:
            raise ValueError("a list of models (a fallback chain) needs at least one model string")
        for raw in choice:
            if not raw.strip():
                raise ValueError(f"blank model string in the fallback chain {choice!r}")
    return choice


def model_chain(choice: ModelChoice) -> tuple[str, ...]:
    """A configured choice as the models to try, in order."""
    return (choice,) if isinstance(choice, str) else tuple(choice)


# Provider-executed tools the gateway knows how to offer (`gateway/provider_tools.py`).
PROVIDER_TOOLS = ("web_fetch", "web_search")

AUTO_PROBE_DEFAULT = (
    "http://127.0.0.1:11434/v1",  # Ollama
    "http://127.0.0.1:8080/v1",  # llama.cpp's server
    "http://127.0.0.1:8000/v1",  # vLLM
    "http://127.0.0.1:1234/v1",  # LM Studio
)


class ModelsConfig(Section):
    """Task → model string, or a list of them (a fallback chain: each is tried, with its own
    retries, when the one before it failed). `default` applies to every task not named.

    Model strings: `auto` (see `default`), `anthropic:NAME`, `openai:NAME`,
    `openai:NAME@http://host:port/v1` (any OpenAI-compatible server: Ollama, vLLM, llama.cpp,
    LM Studio), `local:` (the bundled Gemma 3 270M through llama.cpp in a child process) or
    `local:/path/model.gguf`, and `test:NAME` (deterministic doubles for tests).
    """

    default: ModelChoice = Field(
        default="auto",
        description=(
            'The model of every task not named below. "auto" picks, once per process start: a hosted '
            "model when ANTHROPIC_API_KEY or OPENAI_API_KEY is set (a strong one for respond, critique, "
            "refine and reflect, a cheap one for the rest); else the first chat model of an "
            "OpenAI-compatible server already running on one of `auto_probe`; else the bundled tiny "
            "model (`local:`). `persyn chat` and `persyn doctor` say which."
        ),
    )
    respond: ModelChoice | None = Field(
        default=None, description="The agent's voice.", examples=["anthropic:claude-sonnet-4-6"]
    )
    critique: ModelChoice | None = Field(
        default=None,
        description="Counter-perspective critique of a draft.",
        examples=["anthropic:claude-sonnet-4-6"],
    )
    refine: ModelChoice | None = Field(
        default=None,
        description="Revising a draft after its critique.",
        examples=["anthropic:claude-sonnet-4-6"],
    )
    decide: ModelChoice | None = Field(
        default=None,
        description="The decision to speak (fast, cheap).",
        examples=["anthropic:claude-haiku-4-5"],
    )
    summarize: ModelChoice | None = Field(
        default=None,
        description="Consolidating a conversation into a memory.",
        examples=["anthropic:claude-haiku-4-5"],
    )
    rate: ModelChoice | None = Field(
        default=None, description="Rating a memory's importance.", examples=["anthropic:claude-haiku-4-5"]
    )
    classify: ModelChoice | None = Field(
        default=None,
        description="Small classifications (engagement, sensitivity).",
        examples=["anthropic:claude-haiku-4-5"],
    )
    extract: ModelChoice | None = Field(
        default=None, description="Knowledge-graph extraction.", examples=["anthropic:claude-haiku-4-5"]
    )
    dossier: ModelChoice | None = Field(
        default=None,
        description="Observations and dossiers about people.",
        examples=["anthropic:claude-haiku-4-5"],
    )
    reflect: ModelChoice | None = Field(
        default=None,
        description=(
            "The heartbeat's self-assessment. Any task takes a list instead, a fallback chain: the next "
            "model is tried when one has failed after its retries."
        ),
        examples=[["anthropic:claude-sonnet-4-6", "openai:llama3@http://127.0.0.1:11434/v1"]],
    )
    sandbox: ModelChoice | None = Field(
        default=None,
        description="The sandbox agent that `run_code` delegates to: writes and runs code in the sandbox.",
        examples=["anthropic:claude-sonnet-4-6"],
    )
    caption: ModelChoice | None = Field(
        default=None,
        description=(
            "Describing an image a person sent, so the turn reads it as text (SPEC §4 step 1). Unset: "
            "the respond model's, when its profile says it can see images; else the agent is told it "
            "received an image it could not see."
        ),
        examples=["anthropic:claude-haiku-4-5"],
    )
    voice: ModelChoice | None = Field(
        default=None,
        description=(
            "The fast model that answers each turn of a live call, streamed and with no tools (SPEC "
            "Appendix A). Unset: the decide model's (the fast one), else `default` (`auto` picks a cheap "
            "hosted model)."
        ),
        examples=["anthropic:claude-haiku-4-5"],
    )
    transcribe: str = Field(
        default="local:whisper-tiny.en",
        description=(
            "Transcribing audio a person sent: `local:whisper-tiny.en` (faster-whisper with the packaged "
            "model, the `local` extra; never downloaded at run time) or any OpenAI-compatible "
            "`/audio/transcriptions` endpoint, `openai:whisper-1@http://host:port/v1`."
        ),
        examples=["openai:whisper-1@https://api.openai.com/v1"],
    )
    auto_probe: list[str] = Field(
        default_factory=lambda: list(AUTO_PROBE_DEFAULT),
        description=(
            'Where "auto" looks for a running OpenAI-compatible server when no API key is set, in order of '
            "preference: Ollama, the llama.cpp server, vLLM, LM Studio. Each is asked for GET /v1/models "
            "(all at once, each waiting at most `auto_probe_timeout_seconds`); [] looks nowhere."
        ),
    )
    auto_probe_timeout_seconds: float = Field(
        default=0.5, gt=0, le=30, description="How long each `auto_probe` address may take to answer."
    )
    context_window: int = Field(
        default=0,
        ge=0,
        description="Tokens the respond model takes; 0 = the smallest known window of its chain.",
    )
    request_timeout_seconds: float = Field(
        default=120.0, gt=0, description="Longest wait for one model request."
    )
    max_retries: int = Field(
        default=3, ge=0, le=10, description="Retries of a failed request (429, 5xx, timeouts), with backoff."
    )
    max_output_tokens: int = Field(default=2048, ge=16, description="Bound on every reply.")
    local_max_output_tokens: int = Field(
        default=160,
        ge=16,
        description="Bound on replies of `local:` models: slow on a laptop CPU, and they ramble.",
    )
    max_concurrent_requests: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Requests one agent's gateway has in flight to one model at once; 0 = no limit.",
    )
    tiers: dict[str, Literal["strong", "cheap"]] = Field(
        default_factory=dict[str, Literal["strong", "cheap"]],
        description=(
            "The usage counters' model tier per model string, e.g. "
            '{"openai:llama3.1:8b@http://127.0.0.1:11434/v1" = "cheap"}. Unnamed models are inferred: '
            "haiku, mini, nano, flash, lite and the bundled `local:` are cheap; others strong."
        ),
    )

    provider_tools: dict[str, list[str]] = Field(
        default_factory=dict[str, list[str]],
        description=(
            "Tools the model provider runs itself, inside its reply, per model string, e.g. "
            '{"anthropic:claude-sonnet-4-6" = ["web_search"]}. Known: '
            + ", ".join(f"`{name}`" for name in PROVIDER_TOOLS)
            + ". Anthropic models only (the OpenAI adapter speaks chat completions, which has no "
            "server tools). Offered on the calls that offer tools, listed by `persyn tools list` with "
            "source `provider`; a local tool of the same name is withheld from that model."
        ),
        examples=[{"anthropic:claude-sonnet-4-6": ["web_search"]}],
    )
    provider_tool_max_uses: int = Field(
        default=5, ge=1, le=50, description="Uses of each provider tool the model may make in one request."
    )
    max_pause_resumes: int = Field(
        default=3,
        ge=0,
        le=20,
        description=(
            "Times a reply the provider paused (Anthropic `pause_turn`, a long server-tool turn) is sent "
            "back to continue, each a metered call; past it the turn ends with what it has, logged."
        ),
    )

    @field_validator("provider_tools")
    @classmethod
    def _provider_tools(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for model, names in value.items():
            if not model.startswith("anthropic:"):
                raise ValueError(
                    f"provider_tools for {model!r}: only anthropic models run provider tools here "
                    "(the openai adapter speaks chat completions, which has none)"
                )
            for name in names:
                if name not in PROVIDER_TOOLS:
                    raise ValueError(
                        f"provider_tools for {model!r}: unknown provider tool {name!r} "
                        f"(known: {', '.join(PROVIDER_TOOLS)})"
                    )
        return {model: sorted(set(names)) for model, names in value.items()}

    @field_validator("auto_probe")
    @classmethod
    def _probe_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            scheme, sep, rest = url.partition("://")
            if scheme not in ("http", "https") or not sep or not rest.strip("/"):
                raise ValueError(f"{url!r} is not a server address, e.g. 'http://127.0.0.1:11434/v1'")
        return [url.rstrip("/") for url in value]

    @field_validator("default", *(task.value for task in Task))
    @classmethod
    def _chain(cls, value: ModelChoice | None) -> ModelChoice | None:
        return check_model_choice(value)

    def for_task(self, task: Task) -> str:
        """The first model `task` runs on (the whole chain: `chain_for_task`)."""
        return self.chain_for_task(task)[0]

    def chain_for_task(self, task: Task) -> tuple[str, ...]:
        chosen: ModelChoice | None = getattr(self, task.value)
        if chosen is None and task is Task.CAPTION:
            return self.chain_for_task(Task.RESPOND)  # the voice that answers is the one that looks
        if chosen is None and task is Task.VOICE and self.decide is not None:
            return self.chain_for_task(Task.DECIDE)  # a live call's fast model is the fast one
        return model_chain(chosen or self.default)
