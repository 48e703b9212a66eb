"""Deployment configuration (ARCHITECTURE §8).

One `persyn.toml` per deployment, read once at start into pydantic models. `PERSYN_*`
environment variables override file settings (`PERSYN_MODELS__RESPOND=...` sets
`[models] respond`); secrets (API keys) come only from the environment. This is the only
module that reads `os.environ`.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from persyn.core.errors import ConfigError
from persyn.core.ids import is_id

__all__ = [
    "AUTO_PROBE_DEFAULT",
    "CONFIG_FILE",
    "DEFAULT_HOME",
    "AgentConfig",
    "AutonomyConfig",
    "ConversationConfig",
    "DispatchConfig",
    "GraphConfig",
    "MemoryConfig",
    "MeteringConfig",
    "ModelsConfig",
    "Price",
    "RetrievalWeights",
    "Secrets",
    "Settings",
    "Task",
    "ToolsConfig",
    "home_from_env",
    "load_settings",
    "parse_settings",
]

CONFIG_FILE = "persyn.toml"
DEFAULT_HOME = Path("~/.persyn")


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


ModelChoice = str | list[str]
"""Where a task's model is configured: one model string, or a fallback chain tried in order."""


class _Strict(BaseModel):
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


class AgentConfig(_Strict):
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


AUTO_PROBE_DEFAULT = (
    "http://127.0.0.1:11434/v1",  # Ollama
    "http://127.0.0.1:8080/v1",  # llama.cpp's server
    "http://127.0.0.1:8000/v1",  # vLLM
    "http://127.0.0.1:1234/v1",  # LM Studio
)


class ModelsConfig(_Strict):
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


class Price(_Strict):
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


class MeteringConfig(_Strict):
    """Every model call is metered (SPEC App. C)."""

    event_log: bool = Field(
        default=True,
        description="Write usage.jsonl beside persyn.toml: the exact ledger `persyn usage` reads.",
    )
    prometheus_port: int = Field(
        default=0, ge=0, le=65535, description="Above 0, serve usage counters on PORT/metrics."
    )
    prometheus_host: str = Field(default="127.0.0.1", description="The address the counters are served on.")


class ConversationConfig(_Strict):
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


class DispatchConfig(_Strict):
    """The durable queues (DBOS), their workers and the outbox."""

    # Each look is a claim query (~2 ms CPU), idle or not; an enqueue in this process wakes
    # its worker at once (runtime/_dbos_wake.py).
    queue_polling_seconds: float = Field(
        default=0.25,
        gt=0,
        le=10,
        description="How often a worker looks for events other processes enqueued (`persyn send`, other workers).",
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
    housekeeping_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the scheduler closes idle conversations, sweeps consolidation and purges markers.",
    )
    outbox_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How soon a message another process sent shows in a connected channel.",
    )
    outbox_keep_days: float = Field(
        default=30.0, gt=0, description="Messages for a channel never connected are dropped after this."
    )
    debug_transmit_delay_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Crash-recovery drills: sleep this long between respond and transmit, to kill the process there.",
    )


SensitivityName = Literal["public", "private", "confidential", "restricted"]  # core/records.py Sensitivity
Lens = Literal["adversarial", "predictive", "constrained", "hopes", "fears"]
DeliberationMode = Literal["inline", "deferred"]


class DeliberationConfig(_Strict):
    """Counter-perspective critique, refinement and the decision to speak (SPEC §4, §4.2).

    Before it speaks the agent critiques its own substantive drafts: a provenance check
    (claims about the past against what it recalled) plus one lens drawn at random.
    """

    enabled: bool = Field(default=True, description="Critique, refine and decide before speaking.")
    mode: Literal["auto", "inline", "deferred"] = Field(
        default="auto",
        description=(
            '"auto": deferred on interactive channels (the fast draft is sent at once, the critique lands '
            "in the next turn), inline elsewhere (the refined reply is what is sent)."
        ),
    )
    channels: dict[str, DeliberationMode] = Field(
        default_factory=dict[str, DeliberationMode],
        description="The mode per service, over `mode`.",
        examples=[{"terminal": "inline"}],
    )
    lenses: list[Lens] = Field(
        default_factory=lambda: cast(
            list[Lens], ["adversarial", "predictive", "constrained", "hopes", "fears"]
        ),
        min_length=1,
        description="The lenses one is drawn from per substantive draft; provenance always runs too.",
    )
    seed: int | None = Field(
        default=None,
        description="Fixes the lens draw (per event) for reproducible runs; unset = varies by event.",
        examples=[7],
    )
    substantive_min_words: int = Field(
        default=12,
        ge=1,
        description=(
            "A draft is critiqued when it has at least this many words, or speaks about the past, people, "
            "commitments or numbers at any length."
        ),
    )
    redundancy_threshold: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description=(
            "A reply whose content words overlap this much with what another speaker just said is "
            "suppressed (1.0 = only exact repeats)."
        ),
    )
    # Each critique would cost seconds of the one local model server the next reply needs.
    offline_model: bool = Field(
        default=False,
        description=(
            "Deliberate even when critique would run on the bundled tiny model (Gemma 3 270M, `local:`), "
            "whose critiques are noise; any other model deliberates."
        ),
    )
    parked_ttl_hours: float = Field(
        default=24.0, gt=0, description="How long a deferred conclusion waits to be woven into the next turn."
    )


class GraphConfig(_Strict):
    """The knowledge graph (SPEC §4.3): populated after each conversation closes, read as
    context for the entities an input mentions. Optional: disabled (or failing) it costs
    context, never a turn."""

    enabled: bool = Field(
        default=True, description="Extract entities and relations, and show them as context."
    )
    hops: int = Field(
        default=2, ge=1, le=4, description="How far from a mentioned entity the context reaches."
    )
    max_relations: int = Field(
        default=30, ge=1, le=500, description="At most this many relations in a prompt."
    )
    max_path_hops: int = Field(
        default=4,
        ge=1,
        le=6,
        description="Shortest paths between mentioned entities, up to this many relations.",
    )
    budget_fraction: float = Field(
        default=0.05,
        gt=0,
        le=0.5,
        description="Share of the respond model's context window graph lines may take.",
    )


class AutonomyConfig(_Strict):
    """What the agent does without being spoken to (SPEC §4.7): the heartbeat, reminders, and
    the budgets that keep self-initiated activity from burning tokens unbounded."""

    heartbeat_minutes: float = Field(
        default=60.0,
        ge=1,
        description=(
            "The heartbeat's interval: each beat the agent reviews its recent memories and goals, then acts "
            "or rests. `persyn heartbeat delete` puts it to sleep (durably); `restore` wakes it."
        ),
    )
    tick_seconds: int = Field(
        default=5,
        ge=1,
        le=60,
        description="How often due reminders are looked for (every process may; each firing happens once).",
    )
    schedule: bool = Field(
        default=True, description="Fire reminders in this process; false leaves it to another one."
    )
    daily_token_budget: int = Field(
        default=200_000,
        ge=0,
        description=(
            "Tokens (input + output) an agent's self-initiated runs may use in any rolling 24 hours; past it "
            "runs are skipped, and recorded, until the window moves on. 0 = no autonomous runs."
        ),
    )
    max_runs_per_hour: int = Field(
        default=12,
        ge=0,
        description="Self-initiated runs per agent per hour (a loop breaker); the excess is skipped and recorded.",
    )
    review_records: int = Field(
        default=20, ge=1, le=200, description="How many recent memories the heartbeat reviews."
    )
    max_messages_per_run: int = Field(
        default=2,
        ge=0,
        le=20,
        description="Messages the agent may send to contacts in one self-initiated run.",
    )
    channel_message_tokens: int = Field(
        default=2000,
        ge=0,
        description=(
            "Tokens (estimated, 4 characters a token) the agent may initiate per channel in a rolling 24 hours "
            "with its message tool; beyond it sending is refused, saying why."
        ),
    )
    # SPEC §4.5: what stops two agents talking forever.
    channel_reply_tokens: int = Field(
        default=100_000,
        ge=1,
        description=(
            "Tokens (estimated likewise) of replies per channel in a rolling 24 hours; past it the channel "
            "gets no generated reply until the window moves on. A person chatting all day stays far below."
        ),
    )


class RetrievalWeights(_Strict):
    """Weights of the relevance function (SPEC §4 step 2); the score is their weighted mean."""

    similarity: float = Field(default=1.0, ge=0, description="Vector similarity to the query.")
    keyword: float = Field(default=1.0, ge=0, description="Full-text keyword match.")
    # Questions about the past are as often about long ago as about last week, and a larger
    # weight cost recall on LoCoMo.
    recency: float = Field(default=0.05, ge=0, description="A tie-breaker toward fresher memories.")
    participants: float = Field(default=0.15, ge=0, description="The memory involves who is present.")
    importance: float = Field(default=0.1, ge=0, description="The memory's importance (1-10).")
    date: float = Field(
        default=0.3,
        ge=0,
        description=(
            'Closeness to a date or period the query names ("on 4 March", "last week"); only counted '
            "for queries that name one."
        ),
    )


class MemoryConfig(_Strict):
    """Long-term memory: encoder, retrieval, compartments, consolidation and culling."""

    embedder: str = Field(
        default="wordllama",
        description=(
            'The encoder: "wordllama" (in-process, offline, 256-d), "openai:MODEL@http://host:port/v1" (a '
            'self-hosted /v1/embeddings service), "sentence-transformers:NAME" (extra) or "test:hash" '
            "(tests). After changing it, run `persyn memory reindex`."
        ),
    )
    weights: RetrievalWeights = RetrievalWeights()
    half_life_days: float = Field(
        default=30.0, gt=0, description="Recency decay of a memory's weight in the relevance score."
    )
    strong_threshold: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="Scores from here up are shown to the agent as strong memories...",
    )
    moderate_threshold: float = Field(
        default=0.35,
        ge=0,
        le=1,
        description="...from here up as moderate, below as weak (at most strong_threshold).",
    )
    budget_fraction: float = Field(
        default=0.7, gt=0, le=1, description="Share of the respond model's context window memories may take."
    )
    max_records: int = Field(default=40, ge=1, description="At most this many memories in a prompt.")
    candidates: int = Field(
        default=100, ge=1, description="Candidates each search (vector, keyword) brings to scoring."
    )
    # At 0.1 only noise goes (unrelated queries top out around 0.15 with the default encoder).
    min_score: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Memories scoring below this are not surfaced (0 = every candidate).",
    )
    # Tuned for WordLlama; an encoder whose cosines run high (e5, bge) wants e.g. 0.7 / 0.95.
    similarity_floor: float = Field(
        default=0.1,
        ge=-1,
        le=1,
        description="Cosine similarity is mapped from [floor, ceiling] to [0, 1]: what unrelated texts score...",
    )
    similarity_ceiling: float = Field(
        default=0.7, ge=-1, le=1, description="...and what a close paraphrase scores, with the encoder."
    )
    embedder_dims: int = Field(
        default=0,
        ge=0,
        description=(
            "Vector size: 0 = the encoder's own (WordLlama 256, which also takes 64 or 128; a service's is "
            "checked against what it returns). Changing it needs `persyn memory reindex`."
        ),
    )
    embedder_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A self-hosted embedding service slower than this is skipped for the turn.",
    )
    channel_groups: list[list[str]] = Field(
        default_factory=list[list[str]],
        description="Channels listed together share memory; by default each channel is its own compartment.",
        examples=[[["terminal:terminal", "cli:cli"]]],
    )
    cull_below_importance: int = Field(
        default=3, ge=1, le=10, description="Culling deletes memories rated below this..."
    )
    cull_after_days: float = Field(
        default=14.0, gt=0, description="...and older than this; important ones stay forever."
    )
    dialog_retention_days: float = Field(default=90.0, gt=0, description="Verbatim dialog is kept this long.")
    default_sensitivity: dict[str, str] = Field(
        default_factory=lambda: {"terminal": "private", "cli": "private", "web": "private"},
        description=(
            "Sensitivity of new memories by service (public | private | confidential | restricted); "
            'unknown services get "private".'
        ),
    )

    @field_validator("default_sensitivity")
    @classmethod
    def _known_levels(cls, value: dict[str, str]) -> dict[str, str]:
        allowed = get_args(SensitivityName)
        for service, level in value.items():
            if level not in allowed:
                raise ValueError(
                    f"{level!r} for service {service!r} is not a sensitivity level; "
                    f"allowed: {', '.join(map(repr, allowed))}"
                )
        return value

    @field_validator("embedder")
    @classmethod
    def _known_embedder(cls, value: str) -> str:
        _embedder_kind(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MemoryConfig:
        if self.moderate_threshold > self.strong_threshold:
            raise ValueError(
                f"moderate_threshold {self.moderate_threshold!r} is above strong_threshold "
                f"{self.strong_threshold!r}: the moderate band must start below the strong one"
            )
        if self.similarity_floor >= self.similarity_ceiling:
            raise ValueError(
                f"similarity_floor {self.similarity_floor!r} is not below similarity_ceiling "
                f"{self.similarity_ceiling!r}"
            )
        kind = _embedder_kind(self.embedder)
        allowed = _EMBEDDER_DIMS.get(kind)
        if allowed is not None and self.embedder_dims not in allowed:
            shown = ", ".join(str(d) for d in allowed)
            raise ValueError(
                f"embedder_dims {self.embedder_dims!r} is not valid for embedder {self.embedder!r}; "
                f"allowed: {shown} (0 = the encoder's own size)"
            )
        return self


# What `[memory] embedder` may be (memory/embedder.py `build_embedder` builds them), and the
# `embedder_dims` each takes: WordLlama truncates its 256-d vectors to 64 or 128; a
# sentence-transformers model and the test doubles have a fixed size of their own (0); a
# service's size is whatever it returns, checked on first use (None: any).
_EMBEDDER_FORMS = "'wordllama', 'openai:MODEL@URL', 'sentence-transformers:NAME' or 'test:NAME'"
_EMBEDDER_DIMS: dict[str, tuple[int, ...] | None] = {
    "wordllama": (0, 64, 128, 256),
    "openai": None,
    "sentence-transformers": (0,),
    "test": (0,),
}


def _embedder_kind(spec: str) -> str:
    kind, _, rest = spec.strip().partition(":")
    if kind not in _EMBEDDER_DIMS:
        raise ValueError(f"unknown embedder {spec!r}; expected {_EMBEDDER_FORMS}")
    if kind == "wordllama" and rest:
        raise ValueError(f"embedder {spec!r}: 'wordllama' takes no model name")
    if kind == "openai":
        model, at, url = rest.partition("@")
        if not at or not model or not url.startswith(("http://", "https://")):
            raise ValueError(
                f"embedder {spec!r} must be 'openai:MODEL@URL', e.g. 'openai:bge-small@http://127.0.0.1:8080/v1'"
            )
    if kind in ("sentence-transformers", "test") and not rest:
        raise ValueError(f"embedder {spec!r} names no model: use '{kind}:NAME'")
    return kind


class ToolsConfig(_Strict):
    """The tool loop of the respond step (SPEC §4.6) and its loop breakers.

    A round-trip is one model reply that asks for tools and gets their results back; past
    `max_round_trips` in one activation, further calls are refused and the model must
    answer. Of the calls in one reply, at most `max_calls_per_round` run. A call with the same
    tool name and the same arguments as `max_identical_calls` earlier ones in the activation is
    refused without running. Every refusal is recorded.
    """

    enabled: bool = Field(
        default=True,
        description=(
            "Offer the agent's own tools to the respond model (never to the bundled tiny model, which "
            "cannot call them)."
        ),
    )
    max_round_trips: int = Field(default=6, ge=1, le=50, description="Tool round-trips per activation.")
    max_identical_calls: int = Field(
        default=2, ge=1, le=20, description="Identical calls (same tool, same arguments) per activation."
    )
    max_calls_per_round: int = Field(
        default=8,
        ge=1,
        le=100,
        description="Tool calls run from one model reply; the rest get an error result saying so.",
    )
    call_timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="A tool still running after this long is reported as failed."
    )
    cpu_seconds: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="CPU-bound tools (exact arithmetic) are killed after this long.",
    )
    max_result_chars: int = Field(
        default=8000,
        ge=200,
        le=1_000_000,
        description="Longest tool result the model is shown; longer ones are cut.",
    )


class Secrets(BaseModel):
    """Secrets: only ever from the environment, never from the file."""

    model_config = ConfigDict(frozen=True)

    anthropic_api_key: SecretStr | None = None
    openai_api_key: SecretStr | None = None


class Settings(_Strict):
    home: Path
    storage_url: str | None = Field(
        default=None,
        description="Where agent data lives; unset = SQLite files under data/ beside persyn.toml. Its directory must exist.",
        examples=["sqlite:////absolute/path/persyn.db"],
    )
    agents: list[AgentConfig] = Field(default_factory=list[AgentConfig])
    models: ModelsConfig = ModelsConfig()
    prices: dict[str, Price] = Field(
        default_factory=dict[str, Price],
        description='US dollars per million tokens, per model string, e.g. [prices."anthropic:claude-sonnet-4-6"].',
    )
    metering: MeteringConfig = MeteringConfig()
    conversation: ConversationConfig = ConversationConfig()
    dispatch: DispatchConfig = DispatchConfig()
    memory: MemoryConfig = MemoryConfig()
    deliberation: DeliberationConfig = DeliberationConfig()
    graph: GraphConfig = GraphConfig()
    autonomy: AutonomyConfig = AutonomyConfig()
    tools: ToolsConfig = ToolsConfig()
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="warning", description="`debug` also keeps the tracebacks of logged failures."
    )
    secrets: Secrets = Secrets()

    @field_validator("storage_url")
    @classmethod
    def _storage_directory_exists(cls, value: str | None) -> str | None:
        # A mistyped directory would otherwise be created, holding a new empty database: the
        # agents would start over with no memories while the real ones sit elsewhere.
        if value is None:
            return None
        scheme, sep, rest = value.partition("://")
        if not sep or not scheme:
            raise ValueError(f"{value!r} is not a database URL, e.g. 'sqlite:////absolute/path/persyn.db'")
        if scheme.split("+")[0] != "sqlite":
            return value
        path = rest.removeprefix("/").split("?")[0]
        if path in ("", ":memory:"):
            return value
        parent = Path(path).expanduser().parent
        if not parent.is_dir():
            raise ValueError(
                f"the directory {str(parent)!r} of {value!r} does not exist; create it first "
                "(an existing database is never created anew)"
            )
        return value

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def database_url(self) -> str:
        return self.storage_url or f"sqlite:///{self.data_dir / 'persyn.db'}"

    @property
    def dbos_database_url(self) -> str:
        if self.storage_url and not self.storage_url.startswith("sqlite"):
            return self.storage_url
        return f"sqlite:///{self.data_dir / 'dbos.sqlite'}"

    @property
    def usage_log_path(self) -> Path:
        return self.home / "usage.jsonl"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    def agent(self, name: str | None) -> AgentConfig:
        """The agent called `name` (case-insensitive), or the only one when `name` is None."""
        if not self.agents:
            raise ConfigError(
                f"no agents are configured in {self.home / CONFIG_FILE}; run `persyn init --name NAME`"
            )
        if name is None:
            if len(self.agents) > 1:
                names = ", ".join(a.name for a in self.agents)
                raise ConfigError(f"several agents are configured ({names}); choose one with --agent NAME")
            return self.agents[0]
        for agent in self.agents:
            if agent.name.lower() == name.lower() or agent.id == name.upper():
                return agent
        names = ", ".join(a.name for a in self.agents)
        raise ConfigError(f"no agent named {name!r}; configured agents: {names}")

    def model_for(self, agent: AgentConfig, task: Task) -> str:
        """The first model of `task`'s chain for `agent` (what most callers need to know)."""
        return self.models_for(agent, task)[0]

    def models_for(self, agent: AgentConfig, task: Task) -> tuple[str, ...]:
        """Every model `task` may run on for `agent`, in the order they are tried."""
        chosen = agent.models.get(task.value) or agent.models.get("default")
        return model_chain(chosen) if chosen else self.models.chain_for_task(task)


def home_from_env(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    raw = explicit if explicit is not None else env.get("PERSYN_HOME") or DEFAULT_HOME
    return Path(raw).expanduser().resolve()


_SECRET_ENV = {"anthropic_api_key": "ANTHROPIC_API_KEY", "openai_api_key": "OPENAI_API_KEY"}
# `PERSYN_` variables that are not settings: read by `home_from_env` (and by nothing else).
NOT_SETTINGS_ENV = frozenset({"PERSYN_HOME"})
_ENV_PREFIX = "PERSYN_"
_NOT_FROM_ENV = {
    "agents": "agents are configured in persyn.toml, not in the environment",
    "secrets": "secrets have their own variables: set ANTHROPIC_API_KEY / OPENAI_API_KEY instead",
    "home": "the deployment directory is set by PERSYN_HOME (or --home) alone",
}

_log = logging.getLogger(__name__)


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """`PERSYN_A__B=value` → {"a": {"b": value}}, and where each override came from
    ({("a", "b"): "PERSYN_A__B"}) so that an error names the variable, not the file.
    Values are parsed as TOML scalars when they look like one (numbers, booleans), else kept
    as strings.

    A variable whose first part is no top-level setting (`PERSYN_FOO=1`) is ignored with a
    warning naming it: wrappers and scripts put their own `PERSYN_` variables beside ours.
    One that names a setting's section (`PERSYN_MODELS__RESPND`) is validated like the file,
    so a misspelt key or a bad value is an error naming the variable."""
    overrides: dict[str, Any] = {}
    origins: dict[tuple[str, ...], str] = {}
    for variable, raw in sorted(environ.items()):
        if not variable.startswith(_ENV_PREFIX) or variable in NOT_SETTINGS_ENV:
            continue
        path = tuple(variable.removeprefix(_ENV_PREFIX).lower().split("__"))
        refused = _NOT_FROM_ENV.get(path[0])
        if refused is not None:
            raise ConfigError(f"invalid configuration in the environment:\n  - {variable}: {refused}")
        if path[0] not in Settings.model_fields or any(not part for part in path):
            _log.warning(
                "ignoring environment variable %s: it names no setting (PERSYN_SECTION__KEY, e.g. "
                "PERSYN_MODELS__RESPOND)",
                variable,
            )
            continue
        node = overrides
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                clash = origins.get(path[: depth + 1], variable)
                raise ConfigError(f"invalid environment variables {clash} and {variable}: they overlap")
            node = cast(dict[str, Any], child)
        node[path[-1]] = _parse_scalar(raw)
        origins[path] = variable
    return overrides, origins


def _parse_scalar(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)  # type: ignore[arg-type]
        else:
            merged[key] = value
    return merged


def _describe(error: ValidationError, source: Path, origins: Mapping[tuple[str, ...], str]) -> str:
    lines: list[str] = []
    from_file = from_env = False
    for issue in error.errors():
        loc = tuple(str(p) for p in issue["loc"])
        key = ".".join(loc)
        variable = next((origins[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origins), None)
        if variable is None and issue["type"] == "extra_forbidden":
            # An unknown key under a section the environment set: the variable is the culprit.
            variable = next((v for path, v in origins.items() if path[: len(loc)] == loc), None)
        message = issue["msg"]
        if variable is None and issue["type"] == "value_error":
            # A check across keys (thresholds, embedder and its size): name the variables
            # that set any of them, as the file may not be where the fault is.
            involved = sorted(v for path, v in origins.items() if path[: len(loc)] == loc)
            if involved:
                from_env = True
                message = f"{message} (set in the environment: {', '.join(involved)})"
        ctx = issue.get("ctx") or {}
        if "expected" in ctx and str(ctx["expected"]) not in message:
            message = f"{message} (allowed: {ctx['expected']})"
        if issue["type"] == "extra_forbidden":
            message = "unknown key"
        value = issue.get("input")
        if isinstance(value, bool) and issue["type"] in ("int_type", "float_type"):
            message = f"{message} (a boolean is not a number)"
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        if variable is not None:
            from_env = True
            lines.append(f"  - {variable} ({key}): {message}{shown}")
        else:
            from_file = True
            lines.append(f"  - {key}: {message}{shown}")
    where = " and ".join(w for w, used in ((str(source), from_file), ("the environment", from_env)) if used)
    return "\n".join([f"invalid configuration in {where}:", *lines])


def parse_settings(
    data: Mapping[str, Any], home: Path, environ: Mapping[str, str] | None = None, source: Path | None = None
) -> Settings:
    env = os.environ if environ is None else environ
    overrides, origins = _env_overrides(env)
    merged = _merge(dict(data), overrides)
    merged["home"] = home
    merged["secrets"] = {field: SecretStr(env[var]) for field, var in _SECRET_ENV.items() if env.get(var)}
    if "secrets" in data:
        raise ConfigError(
            f"invalid configuration in {source or home / CONFIG_FILE}: [secrets] is not allowed in the file; "
            "set ANTHROPIC_API_KEY / OPENAI_API_KEY in the environment instead"
        )
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source or home / CONFIG_FILE, origins)) from exc
    where = source or home / CONFIG_FILE
    for key, values in (
        ("name", [a.name.lower() for a in settings.agents]),
        ("id", [a.id for a in settings.agents]),
    ):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            # Two agents with one id would share every memory (rows are namespaced by id).
            raise ConfigError(
                f"invalid configuration in {where}: agents.{key}: {repeated[0]!r} is used by more "
                f"than one agent; each agent needs its own {key}"
            )
    return settings


def load_settings(home: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `$PERSYN_HOME/persyn.toml` (a missing file means defaults and no agents)."""
    env = os.environ if environ is None else environ
    root = home_from_env(home, env)
    path = root / CONFIG_FILE
    data: dict[str, Any] = {}
    if path.exists():
        try:
            raw = path.read_bytes().decode("utf-8")
            data = tomllib.loads(raw)
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"invalid configuration in {path}: the file is not UTF-8 ({exc.reason})"
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"invalid configuration in {path}: not valid TOML: {exc}") from exc
    return parse_settings(data, root, env, path)
