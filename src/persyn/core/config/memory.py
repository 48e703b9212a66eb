"""The configuration's cognition sections: `[deliberation]`, `[graph]`, `[autonomy]`,
`[memory]` (with `[memory.weights]`) and `[tools]` (`core/config.py` composes them into
`Settings`; each key's description is its documentation, as in `core/config/models.py`).
"""

from __future__ import annotations

from typing import Literal, cast, get_args

from pydantic import Field, field_validator, model_validator

from persyn.core.config.models import Section

__all__ = [
    "DEFERRED_TOOLS",
    "AutonomyConfig",
    "DeliberationConfig",
    "DeliberationMode",
    "GraphConfig",
    "Lens",
    "MemoryConfig",
    "RetrievalWeights",
    "SensitivityName",
    "ToolsConfig",
]


SensitivityName = Literal["public", "private", "confidential", "restricted"]  # core/records.py Sensitivity
Lens = Literal["adversarial", "predictive", "constrained", "hopes", "fears"]
DeliberationMode = Literal["inline", "deferred"]


class DeliberationConfig(Section):
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
    decide_ahead: bool = Field(
        default=True,
        description=(
            "Deferred mode: decide whether to speak while the draft is written for every input addressed to "
            "the agent, not only substantive ones, so a plain input whose reply is substantive waits for one "
            "model call, not two; the decision is dropped when the reply comes back short and plain."
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


class GraphConfig(Section):
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


class AutonomyConfig(Section):
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
    run_keep_days: float = Field(
        default=30.0,
        ge=1,
        description=(
            "How long each run's budget state, provenance and sent messages, what caused each "
            "self-initiated conversation, and the channels' sent and replied ledgers are kept; "
            "the housekeeping purges older ones daily. At least 1: the channel budgets' window "
            "is 24 hours."
        ),
    )


class RetrievalWeights(Section):
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


class MemoryConfig(Section):
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


# Rarely needed built-ins: named in `call_tool`'s description rather than defined in full.
DEFERRED_TOOLS = (
    "cancel_reminder",
    "edit_reminder",
    "inspect_self",
    "list_goals",
    "query_graph",
    "recall_dialog",
    "recent_activity",
    "search_dialog",
    "update_goal",
    "workspace_list",
    "workspace_read",
    "workspace_write",
    "write_skill",
)


class ToolsConfig(Section):
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
    deferred: list[str] = Field(
        default_factory=lambda: list(DEFERRED_TOOLS),
        description=(
            "Tools offered by name and summary only, behind one `call_tool` tool that shows a tool's "
            "arguments when asked and runs it (shell patterns: '*__*' = every MCP tool; [] = offer all "
            "in full). Saves prompt tokens on every call."
        ),
    )
