"""The INSERT the store's parts build: one construct for both backends.

`insert(table).on_conflict_do_nothing()` / `.on_conflict_do_update(index_elements=...,
set_=...)` is PostgreSQL's ON CONFLICT, which SQLite (3.24+) spells the same way; SQLAlchemy's
SQLite compiler renders PostgreSQL's construct correctly, while the reverse (SQLite's
construct on PostgreSQL) fails. So every part imports `insert` from here, and a statement
built once at import runs on either backend.
"""

from __future__ import annotations

from sqlalchemy.dialects.postgresql import insert

__all__ = ["insert"]
