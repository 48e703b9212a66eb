"""The engine Persyn hands DBOS for its SQLite system database: WAL, and writers that take turns."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from persyn.runtime.durable._system_sqlite import dbos_sqlite_engine


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    built = dbos_sqlite_engine(f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    assert built is not None
    with built.begin() as connection:
        connection.execute(text("CREATE TABLE t (x INTEGER)"))
    yield built
    built.dispose()


def _turn(engine: Engine) -> threading.Lock:
    with engine.connect() as connection:
        raw: Any = connection.connection.dbapi_connection
        return raw.write_turn


def test_postgres_is_left_to_dbos() -> None:
    assert dbos_sqlite_engine("postgresql://user:pw@localhost/persyn") is None


def test_the_file_is_in_wal_mode_with_normal_sync_and_dbos_pragmas(engine: Engine) -> None:
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
        raw: Any = connection.connection.dbapi_connection
        assert raw.isolation_level == "IMMEDIATE"  # as DBOS's own engine


def test_a_write_holds_the_turn_until_its_transaction_commits(engine: Engine) -> None:
    turn = _turn(engine)
    with engine.connect() as connection:
        connection.execute(text("SELECT count(*) FROM t"))
        assert not turn.locked()  # reads never queue
        connection.execute(text("INSERT INTO t VALUES (1)"))
        assert turn.locked()
        connection.execute(text("UPDATE t SET x = 2"))  # same transaction: no second wait
        connection.commit()
        assert not turn.locked()
    with engine.connect() as connection:
        assert connection.execute(text("SELECT x FROM t")).scalar() == 2


def test_a_rolled_back_or_abandoned_write_hands_the_turn_on(engine: Engine) -> None:
    turn = _turn(engine)
    with engine.connect() as connection:
        connection.execute(text("INSERT INTO t VALUES (1)"))
        assert turn.locked()
        connection.rollback()
        assert not turn.locked()
    with engine.connect() as connection:
        connection.execute(text("DELETE FROM t"))
        assert turn.locked()
    # closed without commit: the pool's reset rolls back and the turn is free again
    assert not turn.locked()
    with engine.begin() as connection:
        assert connection.execute(text("SELECT count(*) FROM t")).scalar() == 0


def test_a_second_writer_waits_for_the_first_instead_of_failing(engine: Engine) -> None:
    first = engine.connect()
    first.execute(text("INSERT INTO t VALUES (1)"))
    done = threading.Event()
    failures: list[BaseException] = []

    def second_writer() -> None:
        try:
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO t VALUES (2)"))
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=second_writer)
    thread.start()
    assert not done.wait(0.2)  # queued behind the open write transaction
    first.commit()
    first.close()
    thread.join(10)
    assert done.is_set() and failures == []
    with engine.connect() as connection:
        assert sorted(connection.execute(text("SELECT x FROM t")).scalars()) == [1, 2]
