"""Copying a whole store to another database (`persyn store copy`, ARCHITECTURE §7.3): SQLite
to PostgreSQL when a deployment outgrows one machine, PostgreSQL to SQLite for a backup.

Every table of `schema.metadata` is copied in dependency order (a row's foreign keys point at
rows already copied), then the record vectors, in batches of `batch_size` rows, each batch one
write transaction on the target. The source is read in one transaction, so the copy is one
snapshot of it, and the counts checked at the end are that snapshot's.

Resuming. The target holds a small bookkeeping table, `persyn_store_copy`, while a copy is
under way: who the source is, and each table finished. It is not part of the schema (no
migration makes it) and is dropped once the counts agree. A copy interrupted at any point
(a kill -9 included) is run again with the same command: finished tables are skipped, the
interrupted one is copied again with `INSERT … ON CONFLICT DO NOTHING` (every table has a
primary key, so a row already there is never doubled) and vectors already there are skipped
by record id. A target with rows and no such table, or one resuming a copy of another
source, is refused: a copy never merges two deployments.

Vectors are read as the float32 unit vectors each backend stores (sqlite-vec's blob,
pgvector's `real[]`) and written through the target backend's own vector writer, so both
backends score them identically. Into PostgreSQL they are one bulk load per vector size
(`_postgres_vectors.BulkVectorLoad`: a large copy drops the HNSW index and builds it once at
the end; a copy killed meanwhile gets it back at the store's next start). The usage ledger is a file beside the store, not in it:
the copy leaves it alone. DBOS's workflow tables are not copied either: stop Persyn and let
its queues drain before copying.
"""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, func, select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from persyn.core.errors import ConfigError, InputError, StoreError
from persyn.core.urls import masked_url
from persyn.store import open_store
from persyn.store.schema.tables import UTCDateTime, metadata
from persyn.store.sql.dml import insert

if TYPE_CHECKING:
    from persyn.store.postgres.vectors import BulkVectorLoad

__all__ = ["COPY_TABLE", "CopyReport", "TableCount", "copy_store"]

COPY_TABLE = "persyn_store_copy"
_STARTED = "*"  # the bookkeeping row naming the source

_progress = Table(
    COPY_TABLE,
    MetaData(),
    Column("item", String(100), primary_key=True),  # "*", a table's name, or "vectors:<dims>"
    Column("source", Text, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
)

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TableCount:
    """Rows of one table (or one vector size, `vectors:<dims>`) in the source and the target."""

    name: str
    source: int
    target: int


@dataclass(frozen=True)
class CopyReport:
    source: str
    target: str
    resumed: bool
    tables: tuple[TableCount, ...]

    @property
    def mismatched(self) -> tuple[TableCount, ...]:
        return tuple(t for t in self.tables if t.source != t.target)

    @property
    def rows(self) -> int:
        return sum(t.target for t in self.tables)


async def copy_store(
    source_url: str, target_url: str, *, batch_size: int = 500, progress: Progress | None = None
) -> CopyReport:
    """Copy every row of the store at `source_url` into the one at `target_url` (created and
    migrated if new), resuming an interrupted copy of the same source; see the module note.
    Raises ConfigError for a URL that names no supported store, InputError for a target that
    holds other data, StoreError when a database cannot be reached or refuses a row."""
    if batch_size < 1:
        raise InputError(f"batch size {batch_size!r} must be at least 1")
    source, target = _side(source_url, "source"), _side(target_url, "target")
    if source.identity == target.identity:
        raise InputError(f"source and target are the same store ({source.shown!r})")
    if source.file is not None and not source.file.is_file():
        raise InputError(f"no store to copy at {source.shown!r} (no such file)")
    for role, side in (("source", source), ("target", target)):
        store = open_store(side.url)  # both at this Persyn's schema version, the target created
        try:
            await store.setup()
        except StoreError as exc:
            raise StoreError(f"cannot open the {role} store: {exc}") from exc
        finally:
            await store.close()
    return await asyncio.to_thread(_copy, source, target, batch_size, progress or _silent)


def _silent(done: int, total: int) -> None:
    del done, total


# --- the two backends -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    """One end of the copy: its URL, how errors name it, its engines and its vector table."""

    url: str
    shown: str
    identity: str  # the same database, however its URL is spelled
    dialect: str
    file: Path | None

    def engine(self, *, writer: bool) -> Engine:
        if self.dialect == "sqlite":
            from persyn.store.sqlite.engine import create_sqlite_engine

            assert self.file is not None
            return create_sqlite_engine(self.file, writer=writer)
        from persyn.store.postgres.engine import create_postgres_engine

        return create_postgres_engine(make_url(self.url), writer=writer, pool_size=1)

    def vector_dims(self, connection: Connection) -> list[int]:
        if self.dialect == "sqlite":
            listing = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE :prefix"
        else:
            listing = (
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_name LIKE :prefix"
            )
        names = connection.execute(text(listing), {"prefix": "memory_vectors_%"}).scalars()
        found = (re.fullmatch(r"memory_vectors_(\d+)", str(name)) for name in names)
        return sorted(int(match.group(1)) for match in found if match)

    def vector_rows(self, connection: Connection, dims: int, batch_size: int) -> Iterator[list[_Vector]]:
        table = f"memory_vectors_{int(dims)}"
        embedding = "embedding" if self.dialect == "sqlite" else "CAST(embedding AS real[])"
        result = connection.execution_options(yield_per=batch_size).exec_driver_sql(
            f"SELECT record_id, agent_id, channel, embedding_model, {embedding} FROM {table}"
        )
        for rows in result.partitions():
            yield [
                _Vector(
                    str(row[0]).strip(),
                    str(row[1]),
                    str(row[2]),
                    str(row[3]),
                    bytes(row[4]) if self.dialect == "sqlite" else struct.pack(f"<{dims}f", *row[4]),
                )
                for row in rows
            ]

    def vector_ids(self, connection: Connection, dims: int) -> set[str]:
        if dims not in self.vector_dims(connection):
            return set()
        rows = connection.exec_driver_sql(f"SELECT record_id FROM memory_vectors_{int(dims)}").scalars()
        return {str(record_id).strip() for record_id in rows}

    def put_vectors(
        self, connection: Connection, rows: Sequence[_Vector], bulk: BulkVectorLoad | None = None
    ) -> None:
        if self.dialect == "sqlite":
            from persyn.store.sqlite import vectors as lite

            lite.put_vectors(connection, [lite.NewVector(*v.fields()) for v in rows])
        else:
            from persyn.store.postgres import vectors as pg

            pg.put_vectors(connection, [pg.NewVector(*v.fields()) for v in rows], bulk)

    @contextmanager
    def bulk_vectors(self, expected: int) -> Iterator[BulkVectorLoad | None]:
        """A PostgreSQL target loads many vectors as `BulkVectorLoad` does (its HNSW index
        built once, at the end); SQLite needs nothing."""
        if self.dialect == "sqlite":
            yield None
            return
        from persyn.store.postgres import vectors as pg

        bulk = pg.BulkVectorLoad(make_url(self.url), expected)
        try:
            yield bulk
        finally:
            bulk.finish()

    def count(self, connection: Connection, name: str) -> int:
        if name.startswith("vectors:"):
            dims = int(name.removeprefix("vectors:"))
            if dims not in self.vector_dims(connection):
                return 0
            return int(connection.exec_driver_sql(f"SELECT count(*) FROM memory_vectors_{dims}").scalar_one())
        return int(connection.execute(select(func.count()).select_from(metadata.tables[name])).scalar_one())


@dataclass(frozen=True)
class _Vector:
    record_id: str
    agent_id: str
    channel: str
    embedding_model: str
    vector: bytes  # float32, unit length

    def fields(self) -> tuple[str, str, str, str, bytes]:
        return (self.record_id, self.agent_id, self.channel, self.embedding_model, self.vector)


def _side(url: str, role: str) -> _Side:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            f"{role} store URL {masked_url(url)!r} is not a URL; expected e.g. 'sqlite:///data/persyn.db'"
        ) from exc
    dialect = parsed.get_backend_name()
    shown = parsed.render_as_string(hide_password=True)
    if dialect == "sqlite":  # the rest of the URL is checked by `open_store`, as everywhere
        file = Path(parsed.database or "").expanduser().resolve()
        return _Side(url, shown, f"sqlite:{file}", dialect, file)
    if dialect == "postgresql":
        identity = parsed.set(drivername="postgresql", password=None).render_as_string()
        return _Side(url, shown, identity, dialect, None)
    raise ConfigError(
        f"unsupported {role} store URL {shown!r}: scheme {dialect!r} is not one of 'sqlite', 'postgresql'"
    )


# --- the copy -------------------------------------------------------------------------------


def _copy(source: _Side, target: _Side, batch_size: int, progress: Progress) -> CopyReport:
    reader, writer = source.engine(writer=False), target.engine(writer=True)
    try:
        with reader.connect() as read, read.begin():
            resumed, done = _start(writer, source, target)
            counts = {t.name: source.count(read, t.name) for t in metadata.sorted_tables}
            counts |= {f"vectors:{d}": source.count(read, f"vectors:{d}") for d in source.vector_dims(read)}
            total = sum(n for name, n in counts.items() if name not in done)
            copied = 0
            progress(copied, total)
            for table in metadata.sorted_tables:
                if table.name in done:
                    continue
                copied = _copy_table(read, writer, table, batch_size, copied, total, progress)
                _finish_item(writer, source, table.name, counts[table.name])
            for dims in source.vector_dims(read):
                item = f"vectors:{dims}"
                if item in done:
                    continue
                with target.bulk_vectors(counts[item]) as bulk:
                    copied = _copy_vectors(
                        read, writer, source, target, dims, batch_size, copied, total, progress, bulk
                    )
                _finish_item(writer, source, item, counts[item])
            with writer.connect() as check:
                tables = tuple(TableCount(name, n, target.count(check, name)) for name, n in counts.items())
            report = CopyReport(source.shown, target.shown, resumed, tables)
            if not report.mismatched:
                with writer.begin() as connection:
                    _progress.drop(connection)
            return report
    except SQLAlchemyError as exc:
        raise StoreError(f"copying {source.shown!r} to {target.shown!r} failed: {exc}") from exc
    finally:
        reader.dispose()
        writer.dispose()


def _start(writer: Engine, source: _Side, target: _Side) -> tuple[bool, set[str]]:
    """Begin the copy or resume it; the items already finished. Refuses a target holding
    other data."""
    with writer.begin() as connection:
        if connection.dialect.has_table(connection, COPY_TABLE):
            rows = {
                row.item: row.source
                for row in connection.execute(select(_progress.c.item, _progress.c.source))
            }
            began = rows.get(_STARTED)
            if began != source.identity:
                raise InputError(
                    f"the target {target.shown!r} holds an interrupted copy of another store "
                    f"({began!r}), not of {source.shown!r}; copy into an empty database"
                )
            return True, set(rows) - {_STARTED}
        for name in [t.name for t in metadata.sorted_tables] + [
            f"vectors:{d}" for d in target.vector_dims(connection)
        ]:
            if target.count(connection, name):
                raise InputError(
                    f"the target {target.shown!r} is not empty (table {name.removeprefix('vectors:')!r} "
                    "has rows); copy into an empty database, or drop it first"
                )
        _progress.create(connection)
        connection.execute(
            _progress.insert().values(item=_STARTED, source=source.identity, rows=0, at=_now())
        )
    return False, set()


def _finish_item(writer: Engine, source: _Side, item: str, rows: int) -> None:
    with writer.begin() as connection:
        connection.execute(_progress.insert().values(item=item, source=source.identity, rows=rows, at=_now()))


def _copy_table(
    read: Connection,
    writer: Engine,
    table: Table,
    batch_size: int,
    copied: int,
    total: int,
    progress: Progress,
) -> int:
    statement = insert(table).on_conflict_do_nothing()
    result = read.execution_options(yield_per=batch_size).execute(select(table))
    for rows in result.partitions():
        with writer.begin() as connection:
            connection.execute(statement, [dict(row._mapping) for row in rows])
        copied += len(rows)
        progress(copied, total)
    return copied


def _copy_vectors(
    read: Connection,
    writer: Engine,
    source: _Side,
    target: _Side,
    dims: int,
    batch_size: int,
    copied: int,
    total: int,
    progress: Progress,
    bulk: BulkVectorLoad | None,
) -> int:
    with writer.connect() as connection:
        present = target.vector_ids(connection, dims)  # from an interrupted run
    for rows in source.vector_rows(read, dims, batch_size):
        new = [v for v in rows if v.record_id not in present]
        if new:
            with writer.begin() as connection:
                target.put_vectors(connection, new, bulk)
        copied += len(rows)
        progress(copied, total)
    return copied


def _now() -> datetime:
    return datetime.now(UTC)
