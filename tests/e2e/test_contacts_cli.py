"""`persyn contacts` through the real CLI: made on first contact, browsed, renamed (issue 5,
first slice)."""

from __future__ import annotations

import json
import signal

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def test_a_contact_is_made_on_first_contact_browsed_and_renamed(persyn: Persyn) -> None:
    assert persyn.run("contacts", "list").stdout.startswith("No contacts yet")
    done = persyn.run("chat", "--as", "Sam", input="Hello, I am Sam.\n")
    assert done.returncode == 0, done.stderr
    (sam,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    # The person is keyed by the operator's login; `--as` names only this session.
    assert sam["display_name"] and sam["kind"] == "human"
    assert [i["service"] for i in sam["identities"]] == ["terminal"]

    shown = json.loads(persyn.run("contacts", "show", sam["id"], "--json").stdout)
    assert shown["display_name_preference"] is None
    (entry,) = shown["conversations"]
    assert entry["summary"] is None  # not consolidated yet: the conversation is still open
    assert sam["id"] in entry["conversation"]["participant_ids"]
    text = persyn.run("contacts", "show", sam["id"]).stdout
    assert "identity: terminal / terminal / operator:" in text and "(not consolidated yet)" in text

    renamed = persyn.run("contacts", "rename", sam["id"], "Samuel")
    assert renamed.returncode == 0 and "is now Samuel" in renamed.stdout
    assert "Samuel" in persyn.run("contacts", "list").stdout


def test_bad_ids_and_names_are_clear_errors_that_change_nothing(persyn: Persyn) -> None:
    persyn.run("chat", "--as", "Sam", input="hi\n")
    (sam,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    bad = persyn.run("contacts", "show", "not-an-id")
    assert bad.returncode != 0 and "has no contact named exactly 'not-an-id'" in bad.stderr
    missing = persyn.run("contacts", "rename", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "X")
    assert missing.returncode != 0 and "has no contact" in missing.stderr
    empty = persyn.run("contacts", "rename", sam["id"], "  ")
    assert empty.returncode != 0 and "invalid name" in empty.stderr
    after = json.loads(persyn.run("contacts", "list", "--json").stdout)
    assert [p["display_name"] for p in after] == [sam["display_name"]]


def test_merge_attach_and_detach_through_the_cli(persyn: Persyn) -> None:
    persyn.run("chat", input="hi from the terminal\n")
    daemon = persyn.start_daemon("run")
    try:
        sent = persyn.run(
            "send", "--as", "samuel", "--channel", "lounge", "hello from the lounge", timeout=120
        )
        assert sent.returncode == 0, sent.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    people = json.loads(persyn.run("contacts", "list", "--json").stdout)
    assert len(people) == 2
    terminal = next(p for p in people if p["identities"][0]["service"] == "terminal")
    lounge = next(p for p in people if p is not terminal)

    merged = persyn.run("contacts", "merge", terminal["id"], lounge["id"], "--name", "Sam")
    assert merged.returncode == 0, merged.stderr
    (sam,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    assert sam["id"] == terminal["id"] and sam["display_name"] == "Sam"
    assert len(sam["identities"]) == 2
    # The lounge conversation is now part of Sam's digest.
    shown = json.loads(persyn.run("contacts", "show", sam["id"], "--json").stdout)
    assert {c["conversation"]["channel"] for c in shown["conversations"]} >= {"lounge"}

    identity = next(i for i in sam["identities"] if i["channel"] == "lounge")
    detached = persyn.run(
        "contacts", "detach", sam["id"], identity["service"], identity["channel"], identity["speaker_id"]
    )
    assert detached.returncode == 0, detached.stderr
    again = persyn.run(
        "contacts", "attach", sam["id"], identity["service"], identity["channel"], identity["speaker_id"]
    )
    assert again.returncode == 0 and identity["speaker_id"] in again.stdout
    refused = persyn.run("contacts", "merge", sam["id"], sam["id"])
    assert refused.returncode != 0 and "into itself" in refused.stderr


def test_prefer_a_channel_and_browse_by_channel(persyn: Persyn) -> None:
    assert persyn.run("channels", "list").stdout.startswith("No conversations yet")
    persyn.run("chat", input="hello\n")
    assert json.loads(persyn.run("channels", "list", "--json").stdout) == ["terminal:terminal"]
    shown = json.loads(persyn.run("channels", "show", "terminal:terminal", "--json").stdout)
    assert len(shown) == 1 and shown[0]["summary"] is None
    missing = persyn.run("channels", "show", "slack:nowhere")
    assert missing.returncode != 0 and "no conversations on" in missing.stderr

    (me,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    bad = persyn.run("contacts", "prefer", me["id"], "nocolon")
    assert bad.returncode != 0 and "SERVICE:CHANNEL" in bad.stderr
    assert persyn.run("contacts", "prefer", me["id"], "terminal:terminal").returncode == 0
    digest = json.loads(persyn.run("contacts", "show", me["id"], "--json").stdout)
    assert digest["preferred_channel"] == "terminal:terminal" and digest["facts"] == {}
