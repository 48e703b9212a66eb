"""The SQLite driver choice, sqlite-vec on every connection, and the memory query helpers."""

from __future__ import annotations

import math
import sqlite3
import struct
import sys
import types
from pathlib import Path

import pytest

from persyn.core.errors import InputError, StoreError
from persyn.store.sql.search import MAX_DIMS, STOP_WORDS, unit_vector
from persyn.store.sqlite import engine as _sqlite_engine
from persyn.store.sqlite.engine import create_sqlite_engine, sqlite_dbapi
from persyn.store.sqlite.keyword_index import fts_any_query
from persyn.store.sqlite.vectors import vector_table


def _unpack(blob: bytes | None) -> list[float]:
    assert blob is not None
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


# driver ------------------------------------------------------------------------------------------
def test_pysqlite3_is_preferred() -> None:
    assert sqlite_dbapi().__name__ == "pysqlite3.dbapi2"


def test_without_pysqlite3_the_standard_module_is_used_if_it_can_load_extensions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pysqlite3.dbapi2", None)  # import now fails
    monkeypatch.setattr(_sqlite_engine, "_can_load_extensions", lambda module: True)
    assert sqlite_dbapi() is sqlite3


def test_without_any_extension_capable_sqlite_the_error_names_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pysqlite3.dbapi2", None)
    monkeypatch.setattr(_sqlite_engine, "_can_load_extensions", lambda module: False)
    with pytest.raises(StoreError, match="pysqlite3-binary"):
        sqlite_dbapi()
    with pytest.raises(StoreError, match="pysqlite3-binary"):
        create_sqlite_engine(Path("unused.db"), writer=True)


def test_a_too_old_sqlite_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    old = types.ModuleType("pysqlite3.dbapi2")
    old.sqlite_version_info = (3, 31, 1)  # type: ignore[attr-defined]
    old.sqlite_version = "3.31.1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pysqlite3.dbapi2", old)
    with pytest.raises(StoreError, match=r">= 3\.38"):
        sqlite_dbapi()


@pytest.mark.parametrize("writer", [True, False])
def test_every_connection_has_sqlite_vec_and_cannot_load_more(tmp_path: Path, writer: bool) -> None:
    if not writer:  # a reader's query_only connection needs an existing WAL database
        create_sqlite_engine(tmp_path / "vec.db", writer=True).dispose()
    engine = create_sqlite_engine(tmp_path / "vec.db", writer=writer, pool_size=2)
    try:
        # raw DB-API connections: no BEGIN, so two writer connections do not wait on each other
        connections = [engine.raw_connection(), engine.raw_connection()]
        for connection in connections:
            cursor = connection.cursor()
            assert str(cursor.execute("SELECT vec_version()").fetchone()[0]).startswith("v")
            with pytest.raises(Exception, match="not authorized"):
                cursor.execute("SELECT load_extension('/nonexistent')")
            cursor.close()
        for connection in connections:
            connection.close()
    finally:
        engine.dispose()


@pytest.mark.skipif(sys.maxsize <= 2**32, reason="a 32-bit process keeps reading pages with read()")
def test_readers_map_the_file_and_see_every_commit_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "mapped.db"
    writer = create_sqlite_engine(path, writer=True)
    reader = create_sqlite_engine(path, writer=False)
    try:
        with writer.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE t (n INTEGER, pad BLOB)")
            connection.exec_driver_sql("INSERT INTO t VALUES (1, zeroblob(100))")
        with reader.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA mmap_size").scalar() == 2**32
            assert connection.exec_driver_sql("SELECT sum(n) FROM t").scalar() == 1
        raw = writer.raw_connection()  # no BEGIN: a pragma query and a checkpoint need none
        try:
            assert raw.cursor().execute("PRAGMA mmap_size").fetchone()[0] == 0  # writes as before
        finally:
            raw.close()
        # The file grows far past what the reader mapped, and the checkpoint moves the new
        # pages from the WAL into it: the mapped reader sees all of them.
        with writer.begin() as connection:
            connection.exec_driver_sql(
                "WITH RECURSIVE s(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM s WHERE i < 5000) "
                "INSERT INTO t SELECT i, zeroblob(1000) FROM s"
            )
        raw = writer.raw_connection()
        try:
            assert raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0  # not busy
        finally:
            raw.close()
        with reader.connect() as connection:
            assert connection.exec_driver_sql("SELECT count(*), sum(n) FROM t").one() == (
                5000,
                5000 * 5001 // 2,
            )
    finally:
        reader.dispose()
        writer.dispose()


def test_busy_is_recognised_with_and_without_an_error_code() -> None:
    coded = sqlite3.OperationalError("whatever")
    coded.sqlite_errorcode = 5  # type: ignore[attr-defined]
    assert _sqlite_engine._is_busy(coded)  # pyright: ignore[reportPrivateUsage]
    assert _sqlite_engine._is_busy(Exception("database is locked"))  # pyright: ignore[reportPrivateUsage]
    assert not _sqlite_engine._is_busy(Exception("no such table: x"))  # pyright: ignore[reportPrivateUsage]


# keyword queries ------------------------------------------------------------------------------
def test_fts_any_query_ors_content_words_and_drops_stop_words() -> None:
    assert fts_any_query("What did she do at the LAKE with Ann?") == '"lake" OR "ann"'
    assert fts_any_query("lake lake Lake") == '"lake"'


def test_fts_any_query_keeps_stop_words_when_nothing_else_is_left() -> None:
    assert fts_any_query("who are you") == '"who" OR "are" OR "you"'
    assert {"who", "are", "you"} <= STOP_WORDS


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", None),
        ("  ?! -- ", None),
        ("\x00", None),
        ('summary:"lake" NEAR(a b)', '"summary" OR "lake" OR "near"'),
        ("lake* ^ann", '"lake" OR "ann"'),
        ("NOT lake OR ann AND", '"lake" OR "ann"'),
        ("snake_case", '"snake" OR "case"'),
        ("café Zoë", '"café" OR "zoë"'),
    ],
)
def test_fts_any_query_makes_syntax_plain_words(query: str, expected: str | None) -> None:
    assert fts_any_query(query) == expected


def test_fts_any_query_caps_its_terms() -> None:
    query = fts_any_query(" ".join(f"w{i}" for i in range(100)))
    assert query is not None and query.count(" OR ") == 31


# vectors -----------------------------------------------------------------------------------------
def test_unit_vector_normalises() -> None:
    assert _unpack(unit_vector([3, 4])) == pytest.approx([0.6, 0.8])
    assert _unpack(unit_vector([1e300, 1e300])) == pytest.approx([math.sqrt(0.5)] * 2)  # no overflow
    assert _unpack(unit_vector([1e-300, 0])) == pytest.approx([1.0, 0.0])  # no underflow
    assert unit_vector([0.0, 0.0, 0.0]) is None


@pytest.mark.parametrize("bad", [[], [math.nan, 1.0], [math.inf, 0.0], [0.0] * (MAX_DIMS + 1)])
def test_unit_vector_refuses_unusable_vectors(bad: list[float]) -> None:
    with pytest.raises(InputError):
        unit_vector(bad)


def test_vector_table_names_are_checked() -> None:
    assert vector_table(256) == "memory_vectors_256"
    for dims in (0, -1, MAX_DIMS + 1):
        with pytest.raises(InputError):
            vector_table(dims)
