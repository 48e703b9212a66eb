"""The tables of what the agent's runs do and send, on the shared `schema.metadata`: the log of
self-initiated runs, deliberation traces, the outbox, run state and its conversations, the
channels' spend ledgers, and the model calls checkpointed inside durable steps.

`tables.py` re-exports every table here, so `from persyn.store.schema.tables import outbox` keeps working.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from persyn.store.schema._columns import (
    UTCDateTime,
    agent_column,
    id_column,
    metadata,
    primary_id,
    provenance_columns,
)

__all__ = [
    "activity_runs",
    "channel_spend",
    "deliberation_traces",
    "model_calls",
    "outbox",
    "run_conversations",
    "run_states",
]

# The log of self-initiated runs (SPEC §4.7; `ActivityEntry`), one row per run or skip, keyed
# by the run's id (its event id). Read newest first by (agent_id, at): the autonomy budget's
# rolling window and `persyn activity`. Migration 11 created it from this definition.
activity_runs = Table(
    "activity_runs",
    metadata,
    primary_id(),
    agent_column(),
    id_column("run_id", nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("reminder_id", String(100), nullable=False),
    Column("objective", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("tokens", Integer, nullable=False),
    id_column("conversation_id", nullable=True),
    *provenance_columns(),
    UniqueConstraint("agent_id", "run_id"),  # a replayed step logs its run once
    Index(None, "agent_id", "at"),
)

# What deliberation did for an inbound event (`DeliberationTrace`): one JSON object per
# event, written in parts as the activation goes. Migration 11 created it from this definition.
deliberation_traces = Table(
    "deliberation_traces",
    metadata,
    primary_id(),
    agent_column(),
    id_column("event_id", nullable=False),
    Column("trace", JSON, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("agent_id", "event_id"),
)

# The outbox (migration 12, `store/ports/outbox.py`): what the agent sends, written before delivery.
# The id is the idempotency key; `delivered_at` NULL means pending. Deliverers scan one
# agent's pending rows for one service in the order written.
outbox = Table(
    "outbox",
    metadata,
    primary_id(),
    agent_column(),
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    id_column("conversation_id", nullable=False),
    id_column("message_id", nullable=False),
    id_column("event_id", nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("delivered_at", UTCDateTime(), nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=True),
    Index(None, "agent_id", "service", "delivered_at", "created_at"),
    Index(None, "created_at"),  # the purge
)

# Runs (migration 14, `store/ports/runs.py`): what each activation's run has done so far (budget
# spend, provenance of what it writes, the messages it sent), what caused each self-initiated
# conversation, and the per-channel ledgers of sent and replied tokens (a rolling window).
# Each is purged by its time column (`[autonomy] run_keep_days`).
run_states = Table(
    "run_states",
    metadata,
    agent_column(),
    id_column("run_id", nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("stopped", Text, nullable=True),
    Column("provenance", JSON, nullable=True),
    Column("sends", JSON, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("agent_id", "run_id"),
    Index(None, "updated_at"),  # the purge
)

run_conversations = Table(
    "run_conversations",
    metadata,
    agent_column(),
    id_column("conversation_id", nullable=False),
    id_column("run_id", nullable=False),
    Column("kind", String(32), nullable=False),
    Column("reminder_id", String(26), nullable=False),
    Column("sensitivity", String(32), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("agent_id", "conversation_id"),
    Index(None, "created_at"),
)

channel_spend = Table(
    "channel_spend",
    metadata,
    agent_column(),
    Column("kind", String(16), nullable=False),  # SpendKind
    Column("service", String(200), nullable=False),
    Column("channel", String(500), nullable=False),
    Column("key", String(64), nullable=False),  # the replied event, or the send's own id
    Column("at", UTCDateTime(), nullable=False),
    Column("tokens", Integer, nullable=False),
    PrimaryKeyConstraint("agent_id", "kind", "service", "channel", "key"),
    Index(None, "agent_id", "kind", "service", "channel", "at"),  # the window's sum
    Index(None, "at"),
)

# Completed model calls checkpointed inside a durable step (migration 20,
# `store/ports/model_calls.py`): a re-run of the step reads them instead of calling again.
model_calls = Table(
    "model_calls",
    metadata,
    Column("call_key", String(300), primary_key=True),
    Column("workflow_id", String(200), nullable=False),
    Column("response", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Index(None, "created_at"),  # the purge
)
