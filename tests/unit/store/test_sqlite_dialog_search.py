"""Dialog search on SQLite searches the full-text index first (`search_messages_query`).

Without statistics (the store never runs ANALYZE), a plain JOIN let SQLite walk the agent's
messages by the (agent_id, created_at) index and run the FTS5 match once per message: 0.3 s
per search at 10,000 messages and seconds at 100,000 (`bench/dialog_search.py`). The cost
must be the matches, not the agent's whole dialog; the plan is what says so without timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, insert
from sqlalchemy.sql.selectable import TextualSelect

from persyn.core.ids import new_id
from persyn.store.schema.migrations import migrate
from persyn.store.schema.tables import conversations, messages
from persyn.store.sqlite.dialog import fts_query, search_messages_query
from persyn.store.sqlite.migrations import SQLITE_MIGRATIONS
from persyn.store.sqlite.store import create_sqlite_engine

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    created = create_sqlite_engine(tmp_path / "persyn.db", writer=True)
    try:
        with created.connect() as connection:
            migrate(connection, SQLITE_MIGRATIONS)
        yield created
    finally:
        created.dispose()


def _plan(connection: Connection, statement: TextualSelect) -> list[str]:
    compiled = statement.compile(dialect=connection.dialect)
    params = compiled.construct_params()
    names = compiled.positiontup or []
    values = tuple(str(params[n]) if isinstance(params[n], datetime) else params[n] for n in names)
    rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled.string}", values)
    return [str(row[-1]) for row in rows]


def _fill(connection: Connection, agent_id: str, texts: list[str]) -> None:
    conversation_id = new_id(T0)
    connection.execute(
        insert(conversations).values(
            id=conversation_id, agent_id=agent_id, service="terminal", channel="main", kind="dm",
            participants=[], started_at=T0, last_activity_at=T0,
        )
    )  # fmt: skip
    connection.execute(
        insert(messages),
        [
            {"id": new_id(T0 + timedelta(seconds=i)), "agent_id": agent_id, "conversation_id": conversation_id,
             "role": "user", "person_id": None, "speaker_name": "Caroline", "text": body,
             "created_at": T0 + timedelta(seconds=i), "event_id": None}
            for i, body in enumerate(texts)
        ],
    )  # fmt: skip


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("since", "until", "count"),
    [(None, None, 20), (_at(10), None, 20), (None, _at(4), 5), (_at(10), _at(14), 5)],
)
def test_the_full_text_index_is_searched_first_and_each_match_fetched_by_rowid(
    engine: Engine, since: datetime | None, until: datetime | None, count: int
) -> None:
    agent_id, other = new_id(T0), new_id(T0)
    with engine.begin() as connection:
        # An agent with many messages, most of them not matching, beside another agent.
        _fill(connection, agent_id, [f"we talked about painting, day {i}" for i in range(50)] + ["tea"] * 500)
        _fill(connection, other, ["painting"] * 50)
    match = fts_query("painting")
    assert match is not None
    statement = search_messages_query(agent_id, match, since=since, until=until, limit=20)
    with engine.connect() as connection:
        plan = _plan(connection, statement)
        found = connection.execute(statement).all()
    assert plan[0].startswith("SCAN messages_fts VIRTUAL TABLE"), plan
    assert any(step.startswith("SEARCH messages USING INTEGER PRIMARY KEY (rowid=?)") for step in plan), plan
    assert not any("ix_messages_agent" in step for step in plan), plan
    # And the answer is the agent's own matches in the window, newest first on equal scores
    # (every match here scores alike: same length, one occurrence).
    assert len(found) == count
    assert all(row.agent_id == agent_id and "painting" in row.text for row in found)
    assert all(
        (since is None or row.created_at >= since) and (until is None or row.created_at <= until)
        for row in found
    )
    assert [row.created_at for row in found] == sorted((row.created_at for row in found), reverse=True)
