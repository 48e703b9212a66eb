"""`persyn store copy` (issue 20 item 4): a whole deployment SQLite → PostgreSQL → SQLite,
equal on every table and vector, recall giving the same top records on each; a copy killed
half way and run again is complete with nothing doubled; refusals are exit 2 and one line.
Real CLI processes, a real PostgreSQL (pgserver)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import Engine, make_url

from persyn.store import open_store
from persyn.store.copying import COPY_TABLE
from persyn.store.postgres.engine import create_postgres_engine, driver_url
from persyn.store.schema.tables import metadata
from persyn.store.sqlite.store import create_sqlite_engine
from persyn.testing.postgres import PostgresForTests

pytestmark = pytest.mark.e2e

RECORDS = 400


def _engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return create_sqlite_engine(Path(parsed.database or ""), writer=False)
    return create_postgres_engine(parsed, writer=False, pool_size=1)


def _dump(url: str) -> dict[str, Any]:
    """Every table's rows (sorted) and every stored vector, as plain values."""
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            found: dict[str, Any] = {
                table.name: sorted(tuple(map(repr, row)) for row in connection.execute(select(table)))
                for table in metadata.sorted_tables
            }
            vectors = "embedding" if engine.dialect.name == "sqlite" else "CAST(embedding AS real[])"
            rows = connection.execute(text(f"SELECT record_id, {vectors} FROM memory_vectors_256"))
            found["vectors"] = sorted(  # float32 bits, as both backends store them
                (str(record_id), v if isinstance(v, bytes) else struct.pack(f"<{len(v)}f", *v))
                for record_id, v in rows
            )
            return found
    finally:
        engine.dispose()


def _count(url: str, sql: str) -> int:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(sql)).scalar_one())
    finally:
        engine.dispose()


def _has_copy_table(url: str) -> bool:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            return engine.dialect.has_table(connection, COPY_TABLE)
    finally:
        engine.dispose()


def _top(persyn: Persyn, url: str) -> list[str]:
    done = persyn.run(
        "memory", "recall", "Memory 42 about the garden", "--limit", "10", "--json", PERSYN_STORAGE_URL=url
    )
    assert done.returncode == 0, done.stderr
    return [item["id"] for item in json.loads(done.stdout)]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Persyn, str]:
    """A SQLite deployment with dialog, a directory, memories with vectors, a reminder."""
    home = tmp_path_factory.mktemp("copy") / "home"
    persyn = Persyn(home=home, env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    assert persyn.run("init", "--name", "Ada").returncode == 0
    chat = persyn.run("chat", input="hello there\nI keep bees in the garden\n")
    assert chat.returncode == 0, chat.stderr
    history = home.parent / "memories.jsonl"
    topics = ["the garden", "bees", "a trip to Lisbon", "chess", "the violin"]
    history.write_text(
        "".join(
            json.dumps(
                {
                    "time": f"2026-01-{1 + i % 28:02d}T10:00:00Z",
                    "channel": "terminal:terminal",
                    "summary": f"Memory {i} about {topics[i % len(topics)]}.",
                    "ref": f"m{i}",
                    "participants": ["Sam"] if i % 3 else [],
                }
            )
            + "\n"
            for i in range(RECORDS)
        )
    )
    imported = persyn.run("memory", "import", str(history))
    assert imported.returncode == 0, imported.stderr
    return persyn, f"sqlite:///{home / 'data' / 'persyn.db'}"


def test_round_trip_is_equal_on_every_table_and_recalls_alike(
    deployment: tuple[Persyn, str], postgres_server: PostgresForTests, tmp_path: Path
) -> None:
    persyn, source = deployment
    original = _dump(source)
    assert len(original["vectors"]) == RECORDS and len(original["messages"]) >= 4
    target = postgres_server.fresh_schema("copy")

    there = persyn.run("store", "copy", "--to", target)
    assert there.returncode == 0, there.stderr
    assert ["vectors:256", str(RECORDS), str(RECORDS)] in [line.split() for line in there.stdout.splitlines()]
    assert "counts verified" in there.stdout and "(resumed)" not in there.stdout
    assert _dump(target) == original
    assert not _has_copy_table(target)  # the bookkeeping went with the verified end

    backup = f"sqlite:///{tmp_path / 'backup' / 'persyn.db'}"
    back = persyn.run("store", "copy", "--from", target, "--to", backup)
    assert back.returncode == 0, back.stderr
    assert _dump(backup) == original

    expected = _top(persyn, source)
    assert len(expected) == 10
    assert _top(persyn, target) == expected == _top(persyn, backup)

    again = persyn.run("store", "copy", "--to", target)  # a finished copy is a store with data
    assert again.returncode == 2
    assert "is not empty (table 'agents' has rows); copy into an empty database" in again.stderr
    assert "copying rows" not in again.stdout
    assert _dump(target) == original  # the refusal wrote nothing


# The copy is held half way through `memory_records` by the database, never by timing: a
# trigger (added to the target for this test only) takes this advisory lock before the row
# that would make 100, while the test holds it; the copy then waits on it until killed.
_HOLD = 0x5045_5253


def _hold_at_100_records(target: str) -> Engine:
    """Migrate the empty target and add the holding trigger; an engine to its database."""

    async def migrate() -> None:
        store = open_store(target)
        try:
            await store.setup()
        finally:
            await store.close()

    asyncio.run(migrate())
    engine = create_engine(driver_url(make_url(target)), isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(
            text(
                "CREATE FUNCTION hold_copy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF (SELECT count(*) FROM memory_records) >= 100 THEN "
                f"PERFORM pg_advisory_xact_lock_shared({_HOLD}); END IF; RETURN NEW; END $$"
            )
        )
        connection.execute(
            text(
                "CREATE TRIGGER hold_copy BEFORE INSERT ON memory_records FOR EACH ROW EXECUTE FUNCTION hold_copy()"
            )
        )
    return engine


def _waiting_on_hold(engine: Engine) -> bool:
    with engine.connect() as connection:
        waiting = connection.execute(
            text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND classid = 0 AND objid = :key"
            ),
            {"key": _HOLD},
        ).scalar_one()
    return bool(waiting)


def test_a_copy_killed_half_way_resumes_to_a_complete_copy(
    deployment: tuple[Persyn, str], postgres_server: PostgresForTests
) -> None:
    persyn, source = deployment
    target = postgres_server.fresh_schema("resume")
    engine = _hold_at_100_records(target)
    try:
        with engine.connect() as holder:
            holder.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _HOLD})
            copying = persyn.popen("store", "copy", "--to", target, "--batch-size", "10")
            try:
                while not _waiting_on_hold(engine):  # the copy reached the 101st record
                    assert copying.poll() is None, persyn.log("store")
                    time.sleep(0.02)
                os.kill(copying.pid, signal.SIGKILL)
            finally:
                copying.wait()
            holder.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _HOLD})
        with engine.connect() as connection:  # waits for the killed copy's transaction to end
            connection.execute(text("DROP TRIGGER hold_copy ON memory_records"))
            connection.execute(text("DROP FUNCTION hold_copy()"))
    finally:
        engine.dispose()
    assert copying.returncode == -signal.SIGKILL
    partial = _count(target, "SELECT count(*) FROM memory_records")
    assert partial == 100 and _has_copy_table(target)  # it really stopped half way, batches committed

    # another source may not take the half-done target over
    other = persyn.run("store", "copy", "--from", postgres_server.fresh_schema("other"), "--to", target)
    assert other.returncode == 2 and "holds an interrupted copy of another store" in other.stderr

    resumed = persyn.run("store", "copy", "--to", target, "--batch-size", "7")
    assert resumed.returncode == 0, resumed.stderr
    assert "(resumed); counts verified" in resumed.stdout
    assert _dump(target) == _dump(source)


def test_bad_urls_and_unreachable_servers_are_exit_2(deployment: tuple[Persyn, str], tmp_path: Path) -> None:
    persyn, source = deployment
    nowhere = tmp_path / "no-server"
    nowhere.mkdir()
    cases = {
        "not a url": "is not a URL",
        "mysql://db/persyn": "scheme 'mysql' is not one of 'sqlite', 'postgresql'",
        # a password in a URL that is wrong is not shown either
        "postgres://alice:hunter2@db/persyn": "'postgres://alice:***@db/persyn': scheme 'postgres' is not",
        "alice:hunter2@db/persyn": "'***@db/persyn' is not a URL",
        f"postgresql://persyn:hunter2@/persyn?host={nowhere}": "cannot open the target store",
        # the same file, spelled otherwise
        source.replace("/data/", "/data/./"): "source and target are the same store",
    }
    for url, said in cases.items():
        done = persyn.run("store", "copy", "--to", url)
        assert done.returncode == 2, (url, done.stdout, done.stderr)
        assert said in done.stderr and "hunter2" not in done.stderr + done.stdout
    missing = persyn.run(
        "store",
        "copy",
        "--from",
        f"sqlite:///{tmp_path / 'none.db'}",
        "--to",
        f"sqlite:///{tmp_path / 'b.db'}",
    )
    assert missing.returncode == 2 and "no store to copy" in missing.stderr
    assert not (tmp_path / "none.db").exists()
