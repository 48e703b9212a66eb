"""The configuration's base and its first sections: tasks, agents, `[models]`, `[prices]`,
`[metering]`, `[conversation]` and `[dispatch]` (`core/config.py` composes them into `Settings`).

Each key's `Field(description=...)` is its documentation: `core/config/template.py` writes the
starter `persyn.toml` and the README's reference from it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from persyn.core.ids import is_id

__all__ = [
    "AUTO_PROBE_DEFAULT",
    "PROVIDER_TOOLS",
    "AgentConfig",
    "ConversationConfig",
    "DispatchConfig",
    "MeteringConfig",
    "ModelChoice",
    "ModelsConfig",
    "Price",
    "Section",
    "Task",
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


ModelChoice = str | list[str]
"""Where a task's model is configured: one model string, or a fallback chain tried in order."""


class Section(BaseModel):
    # Strict: `true` is not an integer and "5" is not a number (TOML and the environment
    # parser already give numbers their type); no inf or nan, which pass every bound check
    # and then break the arithmetic that uses them.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _bounded_duration(cls, value: object, info: ValidationInfo) -> object:
        # A duration past what `timedelta` holds (about 2.7 million years) passes every
        # lower bound and then breaks each activation or housekeeping tick that adds it to
        # a time; nothing in a deployment's life needs more than a century.
        name = info.field_name or ""
        unit = next((seconds for suffix, seconds in _DURATION_UNITS.items() if name.endswith(suffix)), None)
        if unit is not None and isinstance(value, int | float) and value * unit > _LONGEST_DURATION_SECONDS:
            raise ValueError(
                f"{value!r} is longer than 100 years; use at most {_LONGEST_DURATION_SECONDS / unit:g}"
            )
        return value


_DURATION_UNITS = {"_seconds": 1, "_minutes": 60, "_hours": 3600, "_days": 86400}
_LONGEST_DURATION_SECONDS = 100 * 365 * 86400


class AgentConfig(Section):
    """The seed persona: day-zero voice that memory soon augments (SPEC §1)."""

    name: str = Field(
        min_length=1, max_length=64, description="How the agent is called (1 to 64 characters)."
    )
    id: str = Field(description="ULID: the agent's identity; never change it once it has memories.")
    disposition: str = Field(
        default="Curious, candid and warm; prefers honesty to agreement.",
        description="Its temperament, in its own words.",
    )
    objectives: list[str] = Field(
        default_factory=list[str],
        description='What it cares about, e.g. ["learn what my operator is building"].',
    )
    rules: list[str] = Field(
        default_factory=list[str],
        description='Standing rules as conditionals, e.g. ["if asked for secrets, then decline"].',
    )
    models: dict[str, ModelChoice] = Field(
        default_factory=dict[str, ModelChoice],
        description="This agent's own models by task (or `default`), over [models].",
        examples=[{"respond": "anthropic:claude-sonnet-4-6"}],
    )

    @field_validator("id")
    @classmethod
    def _ulid(cls, value: str) -> str:
        if not is_id(value):
            raise ValueError(f"{value!r} is not a ULID (26 Crockford base32 characters)")
        return value.upper()

    @field_validator("models")
    @classmethod
    def _known_tasks(cls, value: dict[str, ModelChoice]) -> dict[str, ModelChoice]:
        for choice in value.values():
            _check_choice(choice)
        return _check_task_keys(value)


def _check_task_keys(value: dict[str, ModelChoice]) -> dict[str, ModelChoice]:
    allowed = {t.value for t in Task} | {"default"}
    for key in value:
        if key not in allowed:
            raise ValueError(f"unknown task {key!r}; allowed: {', '.join(sorted(allowed))}")
    return value


def _check_choice(choice: ModelChoice | None) -> ModelChoice | None:
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
        return _check_choice(value)

    def for_task(self, task: Task) -> str:
        """The first model `task` runs on (the whole chain: `chain_for_task`)."""
        return self.chain_for_task(task)[0]

    def chain_for_task(self, task: Task) -> tuple[str, ...]:
        chosen: ModelChoice | None = getattr(self, task.value)
        return model_chain(chosen or self.default)


class Price(Section):
    """US dollars per million tokens of one model string, what `persyn usage` costs with."""

    input: float = Field(ge=0, description="Per million input tokens.", examples=[3.0])
    output: float = Field(ge=0, description="Per million output tokens.", examples=[15.0])
    cache_read: float | None = Field(
        default=None,
        ge=0,
        description="Per million tokens read from the prompt cache (unset: the input price).",
        examples=[0.3],
    )
    cache_write: float | None = Field(
        default=None,
        ge=0,
        description="Per million tokens written to the prompt cache (unset: the input price).",
        examples=[3.75],
    )
    per_request: dict[str, float] = Field(
        default_factory=dict[str, float],
        description=(
            "US dollars per request of a provider-run tool, by tool. A tool without a price here is "
            "counted on the usage record, not costed."
        ),
        examples=[{"web_search": 0.01}],
    )

    @field_validator("per_request")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for tool, dollars in value.items():
            if dollars < 0:
                raise ValueError(f"per_request price of {tool!r} is negative: {dollars!r}")
        return value


class MeteringConfig(Section):
    """Every model call is metered (SPEC App. C)."""

    event_log: bool = Field(
        default=True,
        description="Write usage.jsonl beside persyn.toml: the exact ledger `persyn usage` reads.",
    )
    prometheus_port: int = Field(
        default=0, ge=0, le=65535, description="Above 0, serve usage counters on PORT/metrics."
    )
    prometheus_host: str = Field(default="127.0.0.1", description="The address the counters are served on.")


class ConversationConfig(Section):
    """Conversations: when they close, how much of them a prompt carries."""

    idle_timeout_minutes: float = Field(
        default=30.0, gt=0, description="An idle conversation closes, and is consolidated into a memory."
    )
    recent_dialog_messages: int = Field(
        default=20, ge=0, le=500, description="How many recent messages of the dialog each prompt carries."
    )
    max_message_chars: int = Field(default=32_000, ge=1, description="Longer inbound messages are refused.")
    # One extraction call per several exchanges, not per turn.
    extract_every_messages: int = Field(
        default=8,
        ge=0,
        le=200,
        description=(
            "Observations and the knowledge graph are extracted in the background every this many new "
            "messages of an open conversation (each read once), and when it closes; 0 = only when it closes."
        ),
    )


class DispatchConfig(Section):
    """The durable queues (DBOS), their workers and the outbox."""

    # Each look is a claim query (~2 ms CPU), idle or not; an enqueue in this process wakes
    # its worker at once (runtime/durable/_wake.py).
    queue_polling_seconds: float = Field(
        default=0.25,
        gt=0,
        le=10,
        description="How often a worker looks for events other processes enqueued (`persyn send`, other workers).",
    )
    # Idle, the claims were most of 3.7% of a core (bench/idle.py); in-process enqueues wake the
    # worker at once whatever this is.
    quiet_polling_seconds: float = Field(
        default=3.0,
        ge=0,
        le=60,
        description=(
            "After 10 s with nothing enqueued or run in this process, a worker looks for events other processes "
            "enqueued this often instead (0 = always `queue_polling_seconds`)."
        ),
    )
    marker_ttl_seconds: float = Field(
        default=3600.0, gt=0, description="How long completion markers are kept."
    )
    worker_concurrency: int = Field(
        default=16, ge=1, le=1000, description="Activations one worker process runs at once (one per agent)."
    )
    executor_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description=(
            "DBOS executor id; unset = a slot of its own per process (<role>-<n>@<host>). If set, give each "
            "worker sharing one database its own."
        ),
        examples=["worker-1"],
    )
    dead_executor_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description=(
            "How often a worker looks for workers that died mid-turn (kill -9, a lost host) and takes over "
            "their unfinished turns."
        ),
    )
    channel_lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description=(
            "A chat network (IRC, Telegram, Matrix, the agent link) is connected by one process of the "
            "deployment, which renews its lease in the store every third of this; if that process dies, "
            "another `persyn run` connects it within this and a third. Hosts sharing a store keep their "
            "clocks well within it of each other."
        ),
    )
    housekeeping_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the scheduler closes idle conversations, sweeps consolidation and purges markers.",
    )
    outbox_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description=(
            "How soon a message another process sent shows in a connected channel, and a web key "
            "revoked by another process ends its open streams."
        ),
    )
    outbox_keep_days: float = Field(
        default=30.0, gt=0, description="Messages for a channel never connected are dropped after this."
    )
    debug_transmit_delay_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Crash-recovery drills: sleep this long between respond and transmit, to kill the process there.",
    )
