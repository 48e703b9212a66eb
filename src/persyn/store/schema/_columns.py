"""What every table module of the shared schema builds on (`tables.py`, `graph.py`,
`runs.py`, `leases.py`): the `metadata` with its constraint naming convention, the
column types that read back the same on SQLite and PostgreSQL (`UTCDateTime`, `NulSafeText`),
the column builders for ids, the agent namespace and a row's provenance, and the values that
fill the provenance columns (`provenance_values`, for the row mappers and the migrations).

`tables.py` re-exports every public name here: code outside the table modules imports them
from there.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import CHAR, JSON, Column, DateTime, MetaData, String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from persyn.store.rows import Provenance

__all__ = [
    "ID_LENGTH",
    "NulSafeText",
    "UTCDateTime",
    "agent_column",
    "id_column",
    "metadata",
    "primary_id",
    "provenance_columns",
    "provenance_values",
]

ID_LENGTH = 26  # a canonical ULID string

# Stable constraint names, so later migrations can refer to (and drop) them on every backend.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class NulSafeText(TypeDecorator[str]):
    """TEXT that keeps a NUL character on PostgreSQL, whose text type cannot hold one (SQLite
    can): there U+0000 is stored as U+FFFE followed by "0", and U+FFFE itself as two of it,
    and read back as it was. U+FFFE is a Unicode noncharacter, absent from real text, so
    stored text (and what search sees) differs only where it held one of the two."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or dialect.name != "postgresql" or ("\x00" not in value and _ESCAPE not in value):
            return value
        return value.replace(_ESCAPE, _ESCAPE * 2).replace("\x00", _ESCAPE + "0")

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or dialect.name != "postgresql" or _ESCAPE not in value:
            return value
        out: list[str] = []
        chars = iter(value)
        for char in chars:
            out.append(("\x00" if next(chars, "") == "0" else _ESCAPE) if char == _ESCAPE else char)
        return "".join(out)


_ESCAPE = "\ufffe"


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC when it leaves the database.

    SQLite has no timezone type: SQLAlchemy stores a fixed-width ISO string and hands back a
    naive datetime. Normalising to UTC on the way in keeps those strings comparable in SQL
    (range filters, expiry) and lets us re-attach UTC on the way out. A naive input is taken
    to be UTC, as `ManualClock` does. On PostgreSQL this is plain TIMESTAMPTZ.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def id_column(name: str, **kwargs: Any) -> Column[str]:
    return Column(name, CHAR(ID_LENGTH), **kwargs)


def primary_id() -> Column[str]:
    return id_column("id", primary_key=True)


def agent_column() -> Column[str]:
    return id_column("agent_id", nullable=False)


def provenance_columns() -> tuple[Column[Any], ...]:
    """Where a row formed (`Provenance`): the same columns as a memory record's, except that
    the channel may be NULL (formed on no channel: the agent on its own)."""
    return (
        Column("channel", String(700), nullable=True),
        Column("participant_ids", JSON, nullable=False),
        Column("sensitivity", String(32), nullable=False),
    )


def provenance_values(provenance: Provenance) -> dict[str, Any]:
    """The `provenance_columns` of a row formed with `provenance`."""
    return {
        "channel": provenance.channel,
        "participant_ids": list(provenance.participant_ids),
        "sensitivity": provenance.sensitivity.value,
    }
