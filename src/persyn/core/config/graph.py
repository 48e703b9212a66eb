"""`[graph]`: the knowledge graph, populated after each conversation closes and read at retrieval.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field

from persyn.core.config.section import Section

__all__ = ["GraphConfig"]


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
