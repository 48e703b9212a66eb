"""`GET /v1/events/{id}` after a restart (issue 33 item 9): which key submitted an event was
kept in the web process's memory only, so after `persyn run` restarted, the key that sent
the message got 404 "no event ... submitted with this key" for its own, answered event. It is
read from the stored event now (a web event's channel is its key), so it survives a restart
and another key still cannot see it. Real processes, real HTTP on loopback."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from persyn_cli import stop_gracefully
from web_daemon import HELLO, start

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _status(base: str, key: str, event_id: str) -> httpx.Response:
    return httpx.get(f"{base}v1/events/{event_id}", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _answered(base: str, key: str, event_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        got = _status(base, key, event_id)
        assert got.status_code == 200, got.text
        if got.json()["status"] != "pending" or time.monotonic() > deadline:
            return got.json()
        time.sleep(0.1)


def test_the_key_that_sent_an_event_still_sees_its_status_after_a_restart_and_no_other_key_does(
    tmp_path: Path,
) -> None:
    web = start(tmp_path, keys={"alice": False, "bob": False, "ops": True})
    alice, bob, ops = web.keys["alice"], web.keys["bob"], web.keys["ops"]
    posted = httpx.post(
        web.url + "v1/agents/Ada/events",
        json={"text": "hello before the restart"},
        headers={"Authorization": f"Bearer {alice}"},
        timeout=60,
    )
    assert posted.status_code == 202, posted.text
    event_id = posted.json()["event_id"]
    before = _answered(web.url, alice, event_id)
    assert (before["status"], before["text"]) == ("transmitted", HELLO)
    assert _status(web.url, bob, event_id).status_code == 404
    web.stop()

    again = web.persyn.start_daemon("run")
    try:
        base = re.findall(r"web channel on (http://\S+)", web.persyn.log("run"))[-1]
        after = _answered(base, alice, event_id)
        assert after == before
        assert _answered(base, ops, event_id) == before  # an operator key sees every event
        refused = _status(base, bob, event_id)
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["message"] == f"no event {event_id} submitted with this key"
        unknown = _status(base, alice, "01" + event_id[2:-4] + "ZZZZ")
        assert unknown.status_code == 404
    finally:
        stop_gracefully(again)
