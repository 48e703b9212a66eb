"""`persyn doctor` on a PostgreSQL store (issue 20): the connection, pgvector and the
migrations, each with what to fix; a real server (pgserver), the real CLI."""

from __future__ import annotations

import pytest
from persyn_cli import Persyn

from persyn.store import open_store
from persyn.store.schema.migrations import LATEST_VERSION
from persyn.testing.postgres import PostgresForTests

pytestmark = pytest.mark.e2e


def test_doctor_checks_connection_pgvector_and_migrations(
    persyn: Persyn, postgres_server: PostgresForTests
) -> None:
    url = postgres_server.fresh_schema()
    fresh = persyn.run("doctor", PERSYN_STORAGE_URL=url)
    assert "[ ok ] postgresql:" in fresh.stdout, fresh.stdout + fresh.stderr
    assert "(PostgreSQL 16" in fresh.stdout
    assert "[ ok ] pgvector: pgvector 0.6" in fresh.stdout
    # doctor itself opens the store, which migrates; the report above it read the empty schema
    assert f"[note] migrations: schema version 0 of {LATEST_VERSION}" in fresh.stdout
    assert "[ ok ] database:" in fresh.stdout
    again = persyn.run("doctor", PERSYN_STORAGE_URL=url)
    assert again.returncode == 0, again.stdout
    assert f"[ ok ] migrations: schema version {LATEST_VERSION} (current)" in again.stdout


def test_doctor_says_how_to_reach_a_server_that_does_not_answer(
    persyn: Persyn, tmp_path_factory: pytest.TempPathFactory
) -> None:
    nowhere = tmp_path_factory.mktemp("no-server")
    url = f"postgresql://persyn:hunter2@/persyn?host={nowhere}"
    done = persyn.run("doctor", PERSYN_STORAGE_URL=url)
    assert done.returncode == 1
    assert "[FAIL] postgresql: postgresql://persyn:***@/persyn" in done.stdout, done.stdout
    assert "fix: start the server, or correct host, port, user, password and database" in done.stdout
    assert "hunter2" not in done.stdout + done.stderr
    assert "test double" in done.stdout  # the rest of the checks still ran


async def test_chat_keeps_dialog_and_workflows_in_postgres(
    persyn: Persyn, postgres_server: PostgresForTests
) -> None:
    """The whole runtime on PostgreSQL: the store and DBOS (its own schema) in one database;
    a second process continues the same conversation."""
    url = postgres_server.fresh_database()
    first = persyn.run("chat", input="hello there\nsecond\n", PERSYN_STORAGE_URL=url)
    assert first.returncode == 0, first.stderr
    assert "You said: hello there" in first.stdout and "You said: second" in first.stdout
    again = persyn.run("chat", input="third\n", PERSYN_STORAGE_URL=url)
    assert again.returncode == 0, again.stderr
    store = open_store(url)
    await store.setup()
    try:
        [agent] = await store.list_agents()
        found = await store.search_messages(agent.id, "third")
        assert sorted(m.text for m in found) == ["You said: third", "third"]
        assert await store.count_messages(agent.id) == 6  # three said, three answered
    finally:
        await store.close()
    assert not (persyn.home / "data" / "persyn.db").exists()  # nothing went to SQLite
