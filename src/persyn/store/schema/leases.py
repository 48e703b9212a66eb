"""The `leases` table (migrations 24 and 26, `store/ports/leases.py`): one row per leased name.

It is on a `MetaData` of its own, not `schema.metadata`: a lease names a process of one
deployment and lapses in seconds, so `persyn store copy` (which copies every table of
`schema.metadata`) leaves it behind rather than carry a dead process's claim to a new store.
"""

from __future__ import annotations

from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table, text

from persyn.store.ports.leases import MAX_HOLDER, MAX_LEASE_NAME, MAX_LEASE_STATE
from persyn.store.schema.tables import UTCDateTime

__all__ = ["leases", "leases_metadata"]

leases_metadata = MetaData()

leases = Table(
    "leases",
    leases_metadata,
    Column("name", String(MAX_LEASE_NAME), nullable=False),
    Column("holder", String(MAX_HOLDER), nullable=False),
    Column("acquired_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("state", String(MAX_LEASE_STATE), nullable=False, server_default=text("''")),
    PrimaryKeyConstraint("name", name="pk_leases"),
)
