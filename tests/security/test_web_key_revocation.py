"""Revoking a web key ends its open streams (issue 33 item 4): `persyn web keys revoke`, run
in its own process while `persyn run` serves the web, cuts off every live stream of that key
at once — an idle one, and one whose turn is still to come — and nothing the agent says to
that key afterwards reaches it. Another key's stream goes on. Real processes, real HTTP on
loopback, a real redis-server where a worker elsewhere runs the turn, on SQLite and on
PostgreSQL."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from persyn_cli import stop_gracefully
from sse_reader import SseReader
from web_daemon import HELLO, split_deployment, start

from persyn.testing.postgres import PostgresForTests
from persyn.testing.redis_server import RedisForTests

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Events = list[tuple[str, dict[str, Any]]]


def _replied(event_id: str) -> Callable[[Events], bool]:
    return lambda events: any(k == "message" and d["event_id"] == event_id for k, d in events)


def _marker(http: httpx.Client, event_id: str, key: str) -> dict[str, Any]:
    """The event's status once its turn ended (asked again while it is pending)."""
    deadline = time.monotonic() + 120
    while True:
        got = http.get(f"/v1/events/{event_id}", headers={"Authorization": f"Bearer {key}"})
        assert got.status_code == 200, got.text
        if got.json()["status"] != "pending" or time.monotonic() > deadline:
            return got.json()
        time.sleep(0.1)


def _ended(stream: SseReader) -> bool:
    return stream.wait(lambda _events: stream.ended, timeout=120)


def test_a_key_revoked_from_the_cli_ends_its_open_stream_at_once_and_another_key_goes_on(
    tmp_path: Path,
) -> None:
    web = start(tmp_path, keys={"alice": False, "bob": False})
    alice = SseReader(web.url + "v1/agents/Ada/stream", web.keys["alice"])
    bob = SseReader(web.url + "v1/agents/Ada/stream", web.keys["bob"])
    try:
        assert (alice.status, bob.status) == (200, 200)
        with httpx.Client(
            base_url=web.url, headers={"Authorization": f"Bearer {web.keys['alice']}"}, timeout=60
        ) as http:
            posted = http.post("/v1/agents/Ada/events", json={"text": "hello, it is Alice"})
            assert posted.status_code == 202, posted.text
            assert alice.wait(_replied(posted.json()["event_id"]))  # the stream works
        before = len(alice.events)

        revoked = web.persyn.run("web", "keys", "revoke", web.key_ids["alice"])
        assert revoked.returncode == 0, revoked.stderr

        # The idle stream ends by itself (nothing was being sent to it), with one last event.
        assert _ended(alice), f"alice's stream is still open: {alice.events[before:]}"
        after = alice.events[before:]
        assert [kind for kind, _ in after] == ["revoked"], after
        assert after[0][1]["reason"] == "this API key was revoked"
        # The key is refused from now on, and a new stream cannot open.
        again = SseReader(web.url + "v1/agents/Ada/stream", web.keys["alice"])
        assert again.status == 401
        again.close()

        # Bob's stream was not touched: his reply still streams to him.
        assert not bob.ended
        with httpx.Client(
            base_url=web.url, headers={"Authorization": f"Bearer {web.keys['bob']}"}, timeout=60
        ) as http:
            posted = http.post("/v1/agents/Ada/events", json={"text": "hello, Bob here"})
            assert posted.status_code == 202, posted.text
            assert bob.wait(_replied(posted.json()["event_id"]))
        assert [k for k, _ in bob.events if k == "revoked"] == []
    finally:
        alice.close()
        bob.close()
        web.stop()


@pytest.mark.services
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_turn_answered_after_the_revocation_sends_nothing_to_the_revoked_key(
    store: str, redis_server: RedisForTests, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The order is fixed, not timed: the front takes alice's message in while no worker runs
    (it waits, queued), the key is revoked, and only then does a worker start and answer.
    Its tokens cross Redis at once; the front's check of open keys is at its slowest (every
    60 s), so what stops them is the check before each delivery to the stream."""
    env = {"PERSYN_DISPATCH__OUTBOX_POLL_SECONDS": "60", "PERSYN_LIVE__REDIS_URL": redis_server.url()}
    if store == "postgresql":
        postgres: PostgresForTests = request.getfixturevalue("postgres_server")
        env["PERSYN_STORAGE_URL"] = postgres.fresh_database("revoked")
    persyn, key = split_deployment(tmp_path, **env)
    alice_id = json.loads(persyn.run("web", "keys", "list", "--json").stdout)[0]["id"]
    ops = persyn.run("web", "keys", "create", "--name", "ops", "--operator", "--json")
    assert ops.returncode == 0, ops.stderr
    operator = json.loads(ops.stdout)["key"]
    front = persyn.start_daemon("run", "--no-workers")
    worker = None
    stream: SseReader | None = None
    try:
        url = re.search(r"web channel on (http://\S+)", persyn.log("run"))
        assert url is not None, persyn.log("run")
        base = url.group(1)
        stream = SseReader(base + "v1/agents/Ada/stream", key)
        assert stream.status == 200
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            posted = http.post("/v1/agents/Ada/events", json={"text": "hello, anyone there?"})
            assert posted.status_code == 202, posted.text
        event_id = posted.json()["event_id"]

        revoked = persyn.run("web", "keys", "revoke", alice_id)
        assert revoked.returncode == 0, revoked.stderr
        worker = persyn.start_daemon("worker")

        assert _ended(stream), f"the stream is still open: {stream.events}\n{persyn.log('worker')}"
        said: Events = stream.of(event_id)
        assert said == [], said  # not a token, not the reply
        assert [kind for kind, _ in stream.events] == ["revoked"], stream.events
        # The turn itself ran and was answered: the operator sees the reply alice did not.
        with httpx.Client(base_url=base, timeout=60) as http:
            refused = http.get(f"/v1/events/{event_id}", headers={"Authorization": f"Bearer {key}"})
            assert refused.status_code == 401
            marker = _marker(http, event_id, operator)
        assert (marker["status"], marker["text"]) == ("transmitted", HELLO)
        assert HELLO not in str(stream.events)
    finally:
        if stream is not None:
            stream.close()
        if worker is not None:
            stop_gracefully(worker)
        stop_gracefully(front)
