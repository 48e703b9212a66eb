"""Live streams and outbox wake-ups across processes through Redis (issue 20 item 3,
ARCHITECTURE §5): a web client held by `persyn run --no-workers` gets the tokens and the reply
of a turn that a separate `persyn worker` runs, with `[live] redis_url` set — on one SQLite
host (which has no other bus) and on PostgreSQL (where Redis replaces LISTEN/NOTIFY). The
front's outbox poll is at its longest (60 s) and tokens have no poll at all, so only Redis can
bring them within the wait; a stranger subscribed to the whole Redis sees them cross. With the
Redis gone, the reply still arrives by the poll and `persyn doctor` says what is lost.
Real processes, a real redis-server, real HTTP on loopback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import redis
from persyn_cli import Persyn
from sse_reader import SseReader
from web_daemon import HELLO, split_deployment, worker_and_front

from persyn.testing.postgres import PostgresForTests
from persyn.testing.redis_server import RedisForTests, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.services]


class Stranger:
    """A plain Redis client subscribed to every channel, on a thread of its own."""

    def __init__(self, url: str) -> None:
        self.heard: list[tuple[str, dict[str, object]]] = []
        self._client = redis.Redis.from_url(url)
        self._pubsub = self._client.pubsub()
        self._pubsub.psubscribe(**{"*": self._heard})
        self._pubsub.get_message(timeout=10)  # the confirmation: subscribed from here on
        self._thread = self._pubsub.run_in_thread(sleep_time=0.05, daemon=True)

    def _heard(self, message: dict[str, bytes]) -> None:
        self.heard.append((message["channel"].decode(), json.loads(message["data"])))

    def close(self) -> None:
        self._thread.stop()
        self._thread.join(10)
        self._pubsub.close()
        self._client.close()


def _deployment(
    tmp_path: Path, storage_url: str | None, redis_url: str, poll_seconds: int
) -> tuple[Persyn, str]:
    env = {"PERSYN_DISPATCH__OUTBOX_POLL_SECONDS": str(poll_seconds), "PERSYN_LIVE__REDIS_URL": redis_url}
    if storage_url is not None:
        env["PERSYN_STORAGE_URL"] = storage_url
    return split_deployment(tmp_path, **env)


def _say_hello(base: str, key: str, stream: SseReader, persyn: Persyn) -> str:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        posted = http.post("/v1/agents/Ada/events", json={"text": "hello from the front"})
        assert posted.status_code == 202, posted.text
        event_id = str(posted.json()["event_id"])
        arrived = stream.wait(
            lambda events: any(k == "message" and d["event_id"] == event_id for k, d in events), timeout=45
        )
        assert arrived, f"no reply on the stream: {stream.of(event_id)}\n{persyn.log('worker')}"
        marker = http.get(f"/v1/events/{event_id}").json()
    assert (marker["status"], marker["text"]) == ("transmitted", HELLO)
    return event_id


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_reply_made_by_a_worker_streams_through_redis_to_a_web_client_of_another_process(
    store: str, redis_server: RedisForTests, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    storage_url = None
    if store == "postgresql":
        postgres: PostgresForTests = request.getfixturevalue("postgres_server")
        storage_url = postgres.fresh_database("redislive")
    persyn, key = _deployment(tmp_path, storage_url, redis_server.url(), poll_seconds=60)
    stranger = Stranger(redis_server.url())
    try:
        with worker_and_front(persyn, key) as (base, stream):
            event_id = _say_hello(base, key, stream, persyn)
            seen = stream.of(event_id)
    finally:
        stranger.close()
    kinds = [k for k, _ in seen]
    deltas = [d for k, d in seen if k == "token" and d["kind"] == "delta"]
    assert deltas, f"no tokens crossed: {kinds}"
    assert "".join(d["text"] for d in deltas if d["phase"] == deltas[0]["phase"]) == HELLO
    assert kinds.index("message") > max(i for i, k in enumerate(kinds) if k == "token")
    assert [d["text"] for k, d in seen if k == "message"] == [HELLO]  # delivered once
    # they crossed on Redis, on this deployment's channels, as ids and text only
    crossed = [(channel, body) for channel, body in stranger.heard if body.get("e") == event_id]
    assert crossed and {channel for channel, _ in crossed} == {crossed[0][0]}
    assert re.fullmatch(r"persyn:[0-9a-f]{16}:live", crossed[0][0])
    assert (
        "".join(str(b["t"]) for _, b in crossed if b["k"] == "delta" and b["p"] == deltas[0]["phase"])
        == HELLO
    )
    assert any(channel.endswith(":outbox") for channel, _ in stranger.heard)  # the wake-up
    doctor = persyn.run("doctor")
    assert re.search(r"live bus \(redis\).*Redis \d", doctor.stdout), doctor.stdout


def test_without_its_redis_the_reply_still_arrives_by_the_poll_and_doctor_says_what_is_lost(
    tmp_path: Path,
) -> None:
    dead = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    persyn, key = _deployment(tmp_path, None, dead, poll_seconds=1)
    with worker_and_front(persyn, key) as (base, stream):
        event_id = _say_hello(base, key, stream, persyn)
        seen = stream.of(event_id)
    assert [d["text"] for k, d in seen if k == "message"] == [HELLO]
    assert not [k for k, _ in seen if k == "token"]  # nothing carried them
    assert "listening failed" in persyn.log("run")
    doctor = persyn.run("doctor")
    assert doctor.returncode != 0
    row = next((line for line in doctor.stdout.splitlines() if "live bus (redis)" in line), "")
    assert "unreachable" in row and "hunter2" not in doctor.stdout, doctor.stdout
    assert "outbox poll (every 1 s)" in doctor.stdout, doctor.stdout


def test_a_malformed_redis_url_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    persyn = Persyn(home=tmp_path / "home")
    assert persyn.run("init", "--name", "Ada").returncode == 0
    doctor = persyn.run("doctor", env={"PERSYN_LIVE__REDIS_URL": "redis//127.0.0.1:6379"})
    assert doctor.returncode != 0
    assert "PERSYN_LIVE__REDIS_URL" in doctor.stdout + doctor.stderr
    assert "'redis//127.0.0.1:6379' is not a Redis URL" in doctor.stdout + doctor.stderr
