"""Live streams and outbox wake-ups across processes on PostgreSQL (issue 20 item 3): a web
client held by `persyn run --no-workers` gets the tokens and the reply of a turn that a
separate `persyn worker` runs, through LISTEN/NOTIFY. The front's outbox poll is set to its
longest (60 s) and tokens have no poll at all, so only the notifications can bring them
within the wait. Real processes, a real PostgreSQL (pgserver), real HTTP on loopback."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from web_daemon import HELLO, split_deployment, worker_and_front

from persyn.testing.postgres import PostgresForTests

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _executor(url: str, event_id: str) -> str | None:
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            found = connection.execute(
                text("SELECT executor_id FROM dbos.workflow_status WHERE workflow_uuid = :id"),
                {"id": event_id},
            ).scalar()
            return None if found is None else str(found)
    finally:
        engine.dispose()


def test_a_reply_made_by_a_worker_streams_to_a_web_client_of_another_process(
    postgres_server: PostgresForTests, tmp_path: Path
) -> None:
    url = postgres_server.fresh_database("live")
    persyn, key = split_deployment(
        tmp_path, PERSYN_STORAGE_URL=url, PERSYN_DISPATCH__OUTBOX_POLL_SECONDS="60"
    )
    with worker_and_front(persyn, key) as (base, stream):
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            posted = http.post("/v1/agents/Ada/events", json={"text": "hello from the front"})
            assert posted.status_code == 202, posted.text
            event_id = posted.json()["event_id"]
            arrived = stream.wait(
                lambda events: any(k == "message" and d["event_id"] == event_id for k, d in events),
                timeout=45,
            )
            assert arrived, f"no reply on the stream: {stream.of(event_id)}\n{persyn.log('worker')}"
            marker = http.get(f"/v1/events/{event_id}").json()
        assert (marker["status"], marker["text"]) == ("transmitted", HELLO)
        seen = stream.of(event_id)
        kinds = [k for k, _ in seen]
        deltas = [d for k, d in seen if k == "token" and d["kind"] == "delta"]
        assert deltas, f"no tokens crossed: {kinds}"
        assert "".join(d["text"] for d in deltas if d["phase"] == deltas[0]["phase"]) == HELLO
        assert kinds.index("message") > max(i for i, k in enumerate(kinds) if k == "token")
        assert [d["text"] for k, d in seen if k == "message"] == [HELLO]  # delivered once
        executor = _executor(url, event_id)
        assert executor is not None and executor.startswith("worker-")  # the front runs no turns
