"""The contact directory through the real CLI (SPEC §4.5, App. B): addresses with type labels
curated out of band, and a contact's digest staying a bounded look at their latest
conversations however long the history (issue 5)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from persyn_cli import Persyn

from persyn.core.config import load_settings
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.store import open_store

pytestmark = pytest.mark.e2e


def _only_contact(persyn: Persyn) -> dict[str, Any]:
    (person,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    return person


def test_addresses_are_added_shown_and_removed(persyn: Persyn) -> None:
    assert persyn.run("chat", "--as", "Sam", input="hello\n").returncode == 0
    sam = _only_contact(persyn)
    assert sam["addresses"] == []
    sam_id = str(sam["id"])

    added = persyn.run("contacts", "add-address", sam_id, "Email", " sam@example.com ")
    assert added.returncode == 0, added.stderr
    assert "can be reached at email sam@example.com" in added.stdout
    again = persyn.run("contacts", "add-address", sam_id, "email", "sam@example.com")
    assert again.returncode == 0 and "already has email sam@example.com" in again.stdout
    assert persyn.run("contacts", "add-address", sam_id, "phone", "+44 20 7946 0000").returncode == 0

    listed = _only_contact(persyn)["addresses"]
    assert [(a["label"], a["value"]) for a in listed] == [
        ("email", "sam@example.com"),
        ("phone", "+44 20 7946 0000"),
    ]
    shown = json.loads(persyn.run("contacts", "show", sam_id, "--json").stdout)
    assert [(a["label"], a["value"]) for a in shown["addresses"]] == [
        ("email", "sam@example.com"),
        ("phone", "+44 20 7946 0000"),
    ]
    text = persyn.run("contacts", "show", sam_id).stdout
    assert "address: email sam@example.com" in text and "address: phone +44 20 7946 0000" in text

    removed = persyn.run("contacts", "remove-address", sam_id, "email", "sam@example.com")
    assert removed.returncode == 0 and "no longer has email sam@example.com" in removed.stdout
    shown = json.loads(persyn.run("contacts", "show", sam_id, "--json").stdout)
    assert [a["label"] for a in shown["addresses"]] == ["phone"]


def test_bad_addresses_are_clear_errors_that_change_nothing(persyn: Persyn) -> None:
    persyn.run("chat", "--as", "Sam", input="hi\n")
    sam_id = str(_only_contact(persyn)["id"])
    cases = [
        (("add-address", sam_id, "e mail", "sam@example.com"), "invalid address label"),
        (("add-address", sam_id, "email", "  "), "invalid address"),
        (("add-address", sam_id, "email", "a\nb"), "one line"),
        (("add-address", "not-an-id", "email", "sam@example.com"), "no contact named exactly"),
        (("add-address", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "email", "x@example.com"), "has no contact"),
        (("remove-address", sam_id, "email", "never@example.com"), "has no email address"),
    ]
    for args, complaint in cases:
        done = persyn.run("contacts", *args)
        assert done.returncode != 0 and complaint in done.stderr, (args, done.stderr)
    assert _only_contact(persyn)["addresses"] == []


def test_the_commands_explain_themselves(persyn: Persyn) -> None:
    overview = persyn.run("contacts", "--help").stdout
    assert "add-address" in overview and "remove-address" in overview
    helped = persyn.run("contacts", "add-address", "--help", COLUMNS="200").stdout
    assert "LABEL" in helped and "email, phone" in helped and "VALUE" in helped


def test_a_long_known_contact_shows_their_latest_conversations_with_summaries(persyn: Persyn) -> None:
    """Sam's five latest conversations are older than hundreds of other people's, and their
    memories older than hundreds of others: the digest still finds them (by index, not by
    scanning the newest conversations and memories)."""
    persyn.run("chat", "--as", "Sam", input="hi\n")
    sam_id = str(_only_contact(persyn)["id"])
    settings = load_settings(persyn.home, environ={})
    agent_id = settings.agent(None).id
    start = datetime(2020, 1, 1, tzinfo=UTC)

    async def a_long_history() -> list[str]:
        store = open_store(settings.database_url)
        await store.setup()
        try:
            sams: list[str] = []
            for day in range(8):
                when = start + timedelta(days=day)
                talk = await store.open_conversation(agent_id, "slack", f"sam-{day}", [sam_id], when, 60)
                sams.append(talk.id)
            records: list[MemoryRecord] = []
            for day in range(8):
                when = start + timedelta(days=day)
                records.append(_memory(agent_id, sams[day], sam_id, f"Sam and I talked on day {day}.", when))
            for n in range(350):  # everyone else, all more recent
                when = start + timedelta(days=30, minutes=n)
                other = new_id(when)
                talk = await store.open_conversation(agent_id, "slack", f"crowd-{n}", [other], when, 60)
                records.append(_memory(agent_id, talk.id, other, f"A stranger, number {n}.", when))
            await store.add_records(records, None, None)
            return sams
        finally:
            await store.close()

    sams = asyncio.run(a_long_history())
    shown = json.loads(persyn.run("contacts", "show", sam_id, "--json").stdout)
    latest = [(c["conversation"]["id"], c["summary"]) for c in shown["conversations"]]
    # The terminal chat of today first (not consolidated), then Sam's four latest from 2020.
    assert latest[0][1] is None and latest[0][0] not in sams
    assert latest[1:] == [(sams[day], f"Sam and I talked on day {day}.") for day in (7, 6, 5, 4)]
    text = persyn.run("contacts", "show", sam_id).stdout
    assert "Sam and I talked on day 7." in text and "day 3" not in text


def _memory(
    agent_id: str, conversation_id: str, person_id: str, summary: str, when: datetime
) -> MemoryRecord:
    return MemoryRecord(
        id=new_id(when),
        agent_id=agent_id,
        created_at=when,
        channel=channel_key("slack", "general"),
        participant_ids=(person_id,),
        summary=summary,
        conversation_id=conversation_id,
    )
