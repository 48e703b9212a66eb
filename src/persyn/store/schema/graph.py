"""The knowledge graph's tables (SPEC §4.3), on the shared `schema.metadata` (ARCHITECTURE §4):
entities and typed relations between them. An entity is
one row per agent and normalised name (`key`); what the agent learned about it lives in
`graph_mentions`, one per compartment it was learned in (channel, sensitivity, the people
present), so the same compartment rules as memories decide what may surface. Relations
carry that provenance themselves. `graph_fact_participants` lists the people present when
a mention or relation was learned (the agent itself excluded), keyed by the fact's id.
`graph_links` lists each relation from both ends, so a traversal follows one index
whichever way a relation points.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, ForeignKeyConstraint, Index, String, Table, Text, UniqueConstraint

from persyn.store.schema.tables import UTCDateTime, agent_column, id_column, metadata, primary_id

__all__ = [
    "graph_entities",
    "graph_fact_participants",
    "graph_links",
    "graph_mentions",
    "graph_relations",
]

graph_entities = Table(
    "graph_entities",
    metadata,
    primary_id(),
    agent_column(),
    Column("name", String(300), nullable=False),
    Column("key", String(300), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "id"),  # target of composite foreign keys
    UniqueConstraint("agent_id", "key"),  # one entity per name: upserts never duplicate
)

graph_mentions = Table(
    "graph_mentions",
    metadata,
    primary_id(),
    agent_column(),
    id_column("entity_id", nullable=False),
    # What the entity is (person, place...) as learned here: like its attributes, a kind
    # learned in one compartment is not shown in another.
    Column("kind", String(100), nullable=False),
    Column("channel", String(700), nullable=False),  # channel_key(service, channel)
    Column("sensitivity", String(32), nullable=False),
    Column("participants_key", Text, nullable=False),  # sorted person ids, comma-joined
    id_column("conversation_id", nullable=True),
    Column("attributes", JSON, nullable=False),  # {name: value}
    Column("learned_at", UTCDateTime(), nullable=False),
    ForeignKeyConstraint(["agent_id", "entity_id"], ["graph_entities.agent_id", "graph_entities.id"]),
    Index(None, "agent_id", "entity_id"),
)

graph_relations = Table(
    "graph_relations",
    metadata,
    primary_id(),
    agent_column(),
    id_column("source_id", nullable=False),
    Column("relation", String(100), nullable=False),
    id_column("target_id", nullable=False),
    Column("channel", String(700), nullable=False),
    Column("sensitivity", String(32), nullable=False),
    Column("participants_key", Text, nullable=False),
    id_column("conversation_id", nullable=True),
    Column("learned_at", UTCDateTime(), nullable=False),
    ForeignKeyConstraint(["agent_id", "source_id"], ["graph_entities.agent_id", "graph_entities.id"]),
    ForeignKeyConstraint(["agent_id", "target_id"], ["graph_entities.agent_id", "graph_entities.id"]),
    Index(None, "agent_id", "source_id"),
    Index(None, "agent_id", "target_id"),
)

graph_links = Table(
    "graph_links",
    metadata,
    primary_id(),
    agent_column(),
    id_column("from_id", nullable=False),
    id_column("to_id", nullable=False),
    id_column("relation_id", nullable=False),
    # Not (agent_id, from_id): ULIDs are unique anyway, and without an agent_id prefix the
    # planner can only walk outward from the recursive row, never scan the agent's links.
    Index(None, "from_id"),
)

graph_fact_participants = Table(
    "graph_fact_participants",
    metadata,
    primary_id(),
    agent_column(),
    id_column("fact_id", nullable=False),  # a graph_mentions or graph_relations id
    id_column("person_id", nullable=False),
    UniqueConstraint("agent_id", "fact_id", "person_id"),
    Index(None, "agent_id", "person_id"),  # merge re-attributes by person
)
