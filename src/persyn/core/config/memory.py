"""`[memory]` (with `[memory.weights]`): retrieval, scoring, consolidation and the embedder; and
`[graph]`: the knowledge graph, populated after each conversation closes and read at retrieval.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from persyn.core.section import Section

__all__ = ["GraphConfig", "MemoryConfig", "RetrievalWeights", "SensitivityName"]


SensitivityName = Literal["public", "private", "confidential", "restricted"]  # core/records.py Sensitivity


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
            'The encoder: "wordllama" (in-process, offline, 256-d), "minilm" (all-MiniLM-L6-v2 int8 ONNX, '
            'in-process, offline, 384-d; reads whole sentences, ~10x the CPU), "openai:MODEL@http://host:port/v1" '
            '(a self-hosted /v1/embeddings service), "sentence-transformers:NAME" (extra) or "test:hash" '
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
    # 0.8 gained LoCoMo recall_all@5 on observations, 0.759 -> 0.776 (bench/locomo.py): the top of
    # a ranking often held four memories of one conversation and none of the one that answered.
    # With the raw dialog merged in (a day's lines and memories compete), 0.6 gained again:
    # 0.800 -> 0.804 observations, 0.786 -> 0.793 summaries; 0.4 and 0.2 no more (0.805 / 0.795).
    episode_penalty: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description=(
            "Each further memory of the same channel and day in a ranking counts this share of its score "
            "(compounding), so one conversation does not fill the top; 1 = rank by score alone."
        ),
    )
    # LoCoMo dev recall_all@5 (bench/locomo.py): observations 0.776 -> ~0.80, session summaries
    # 0.726 -> ~0.80 with the raw dialog merged in (SPEC §4.2 "check the raw record").
    dialog_recall: bool = Field(
        default=True,
        description=(
            "Recall also ranks the raw dialog by its words and merges it with the memories by score; "
            "a message is shown as what was said (who, when), under the same compartment and sensitivity rule."
        ),
    )
    dialog_candidates: int = Field(
        default=20, ge=1, description="Messages the raw-dialog search brings to scoring (each embedded once)."
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
_EMBEDDER_FORMS = "'minilm', 'wordllama', 'openai:MODEL@URL', 'sentence-transformers:NAME' or 'test:NAME'"
_EMBEDDER_DIMS: dict[str, tuple[int, ...] | None] = {
    "minilm": (0, 384),
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
    if kind == "minilm" and rest not in ("", "all-MiniLM-L6-v2-int8"):
        raise ValueError(f"embedder {spec!r}: 'minilm' ships one model, 'all-MiniLM-L6-v2-int8'")
    if kind == "openai":
        model, at, url = rest.partition("@")
        if not at or not model or not url.startswith(("http://", "https://")):
            raise ValueError(
                f"embedder {spec!r} must be 'openai:MODEL@URL', e.g. 'openai:bge-small@http://127.0.0.1:8080/v1'"
            )
    if kind in ("sentence-transformers", "test") and not rest:
        raise ValueError(f"embedder {spec!r} names no model: use '{kind}:NAME'")
    return kind


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
