"""`named_contact`: how every operator command that takes a contact finds it (an id, or a name
exactly one contact goes by), on a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.store import Identity
from persyn.store.base import Person
from persyn.store.sqlite.store import SQLiteStore
from persyn.tools.builtin._contacts import named_contact

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = new_id(T0)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "persyn.db")
    await opened.setup()
    yield opened
    await opened.close()


async def _person(store: SQLiteStore, name: str, service: str, speaker: str) -> Person:
    identity = Identity(service=service, channel="dm", speaker_id=speaker)
    return await store.resolve_person(AGENT, identity, name, "human", T0)


async def test_an_id_or_a_unique_exact_name_finds_the_contact(store: SQLiteStore) -> None:
    sam = await _person(store, "Sam  Okafor", "slack", "U1")
    assert (await named_contact(store, AGENT, "Ada", sam.id)).id == sam.id
    assert (await named_contact(store, AGENT, "Ada", sam.id.lower())).id == sam.id
    assert (await named_contact(store, AGENT, "Ada", " sam okafor ")).id == sam.id
    assert (await named_contact(store, AGENT, "Ada", "U1")).id == sam.id  # a speaker id


async def test_a_name_several_contacts_go_by_is_an_error_listing_each_with_its_id(store: SQLiteStore) -> None:
    first = await _person(store, "Ann", "slack", "U2")
    second = await _person(store, "ann", "matrix", "@ann:example.org")
    with pytest.raises(InputError) as caught:
        await named_contact(store, AGENT, "Ada", "Ann")
    message = str(caught.value)
    assert message.startswith("agent Ada: 2 contacts match 'Ann': ")
    assert f"Ann ({first.id})" in message and f"ann ({second.id})" in message
    assert "give the id" in message


async def test_no_such_contact_is_an_error_and_a_first_word_is_not_a_name(store: SQLiteStore) -> None:
    sam = await _person(store, "Sam Okafor", "slack", "U1")
    with pytest.raises(InputError) as caught:
        await named_contact(store, AGENT, "Ada", "Sam")
    assert str(caught.value) == (
        f"agent Ada has no contact named exactly 'Sam'; perhaps Sam Okafor ({sam.id}): "
        "give the whole name or the id (see `persyn contacts list`)"
    )
    with pytest.raises(InputError, match=r"^agent Ada has no contact named exactly 'Zed' \(see `persyn"):
        await named_contact(store, AGENT, "Ada", "Zed")
    missing = new_id(T0)
    with pytest.raises(InputError, match=f"^agent Ada has no contact with id '{missing}' "):
        await named_contact(store, AGENT, "Ada", missing)
    with pytest.raises(InputError, match=r"^agent Ada: say whom"):
        await named_contact(store, AGENT, "Ada", "   ")
