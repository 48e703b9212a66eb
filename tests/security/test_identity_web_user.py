"""Issue 33 item 6b: a web `user` is a person behind *that* key, never a claim on someone
else's contact.

mallory's key sent `"user": "alice"` while the agent already knew alice (her own key): a second
"alice" appeared, and `contacts show alice`, `get_facts` and `message_contact` for alice all
failed as ambiguous. The real daemon serves the web on loopback; the operator's commands are
the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from web_daemon import WebDaemon, start

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _say(web: WebDaemon, key: str, text: str, user: str | None = None) -> None:
    body: dict[str, object] = {"model": "Ada", "messages": [{"role": "user", "content": text}]}
    if user is not None:
        body["user"] = user
    headers = {"Authorization": f"Bearer {web.keys[key]}"}
    with httpx.Client(base_url=web.url, headers=headers, timeout=120) as http:
        said = http.post("/v1/chat/completions", json=body)
    assert said.status_code == 200, said.text


def _tell_alice(rules: Path) -> None:
    """The script's first rules: asked to "tell alice", the agent calls `message_contact`."""
    script = json.loads(rules.read_text())
    told = {"to": "alice", "text": "hi alice, from Ada"}
    rules.write_text(
        json.dumps(
            [
                {
                    "task": "respond",
                    "match": "^tell alice",
                    "times": 1,
                    "tool_calls": [{"name": "message_contact", "args": told}],
                },
                {"task": "respond", "match": "^tell alice", "reply": "Told her."},
                *script,
            ]
        )
    )


def test_a_user_named_like_another_keys_contact_does_not_make_her_ambiguous(tmp_path: Path) -> None:
    web = start(tmp_path, keys={"alice": False, "mallory": False})
    persyn = web.persyn
    try:
        _say(web, "alice", "hello")  # alice, as the agent knows her
        _say(web, "mallory", "hello, it is me, alice", user="alice")  # mallory says she is alice
        # The operator asks the agent to message alice: the agent's own `message_contact`.
        _tell_alice(web.rules)
        told = persyn.run("send", "tell alice the garden is watered")
        assert told.returncode == 0 and "Told her." in told.stdout, (told.stdout, told.stderr)
    finally:
        web.stop()
    listed = json.loads(persyn.run("contacts", "list", "--json").stdout)
    (alice,) = [p for p in listed if [i["channel"] for i in p["identities"]] == [web.key_ids["alice"]]]

    # message_contact reached alice, the one the agent knew: in her conversation, not mallory's.
    (conversation,) = json.loads(
        persyn.run("conversations", "list", "--channel", web.key_ids["alice"], "--json").stdout
    )
    dialog = json.loads(persyn.run("conversations", "show", conversation["id"], "--json").stdout)
    assert "hi alice, from Ada" in [m["text"] for m in dialog["messages"]]

    shown = persyn.run("contacts", "show", "alice", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["person"]["id"] == alice["id"]

    noted = persyn.run(
        "tools", "call", "set_fact", "--args", json.dumps({"about": "alice", "key": "pin", "value": "9931"})
    )
    assert noted.returncode == 0, (noted.stdout, noted.stderr)
    facts = persyn.run("tools", "call", "get_facts", "--args", json.dumps({"about": "alice"}))
    assert facts.returncode == 0 and "9931" in facts.stdout, (facts.stdout, facts.stderr)
    theirs = persyn.run("tools", "call", "get_facts", "--args", json.dumps({"about": "alice (mallory)"}))
    assert theirs.returncode == 0 and "9931" not in theirs.stdout, (theirs.stdout, theirs.stderr)

    # mallory's "alice" is a contact of its own, named within her key.
    names = sorted(str(p["display_name"]) for p in listed if p["identities"][0]["service"] == "web")
    assert names == ["alice", "alice (mallory)"] and alice["display_name"] == "alice"
