"""`persyn memory import` (memory/importer.py) into the real SQLite store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from persyn.core.config import AgentConfig, MemoryConfig
from persyn.core.errors import InputError
from persyn.core.ids import derived_id, id_time, new_id
from persyn.core.records import Sensitivity
from persyn.memory.importer import SpeakerContact, import_jsonl, parse_speaker_contact, read_speaker_contacts
from persyn.memory.retrieval import Retriever
from persyn.store import open_store
from persyn.store.base import Identity
from persyn.store.capabilities import FullStore
from persyn.testing.embedder import HashEmbedder, UnavailableEmbedder

NOW = datetime(2026, 3, 10, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(NOW))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await opened.setup()
    await opened.ensure_agent(AGENT.id, AGENT.name, NOW)
    try:
        yield opened
    finally:
        await opened.close()


class People:
    """Creates a person the first time a name is seen (as the CLI does); refuses "Mallory"."""

    def __init__(self, store: FullStore) -> None:
        self.store = store
        self.ids: dict[str, str] = {}

    async def __call__(self, name: str, channel: str, seen_at: datetime) -> str:
        if name == "Mallory":
            raise InputError(f"no contact {name!r} may be imported")
        identity = Identity(service="import", channel=channel, speaker_id=name.lower())
        person = await self.store.resolve_person(AGENT.id, identity, name, "human", NOW)
        self.ids[name] = person.id
        return person.id


def _write(path: Path, *lines: dict[str, Any] | str) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


GOOD = {
    "time": "2026-03-04T18:30:00+01:00",
    "channel": "discord:general",
    "participants": ["Ann", "Bo"],
    "summary": "I helped Ann and Bo plan a hiking trip on the Kesch ridge.",
    "importance": 7,
    "tags": ["travel"],
    "sensitivity": "confidential",
    "ref": "export-1",
    "dialog": [
        {"speaker": "Ann", "text": "Shall we do the Kesch ridge?", "time": "2026-03-04T18:30:00+01:00"},
        {"speaker": "Ada", "text": "Yes, start early."},
    ],
}


async def test_good_lines_import_and_bad_lines_are_reported_by_number(
    store: FullStore, tmp_path: Path
) -> None:
    path = _write(
        tmp_path / "history.jsonl",
        GOOD,
        "{not json",
        "",  # blank lines are skipped but still counted
        {"time": "yesterday-ish", "channel": "x", "summary": "s"},
        {
            "time": "2026-03-05T10:00:00",
            "channel": "web",
            "summary": "I read Bo's essay.",
            "participants": ["Bo"],
        },
        '["a", "list"]',
        {"time": "2026-03-05T10:00:00", "channel": "web", "summary": "", "participants": []},
        {
            "time": "2026-03-06T10:00:00",
            "channel": "web",
            "summary": "Mallory was here.",
            "participants": ["Mallory"],
        },
        {"time": "2026-03-06T10:00:00", "channel": "web", "summary": "ok", "sumary": "typo"},
    )
    report = await import_jsonl(path, store, HashEmbedder(), AGENT, People(store))
    assert (report.imported, report.duplicates, report.messages, report.without_vectors) == (2, 0, 2, 0)
    assert [(p.line, p.reason.split(":")[0]) for p in report.problems] == [
        (2, "not JSON"),
        (4, "time"),
        (6, "expected a JSON object, got list"),
        (7, "summary"),
        (8, "no contact 'Mallory' may be imported"),
        (9, "sumary"),
    ]


async def test_records_carry_the_line_and_link_back_to_the_dialog(store: FullStore, tmp_path: Path) -> None:
    people = People(store)
    report = await import_jsonl(_write(tmp_path / "h.jsonl", GOOD), store, HashEmbedder(), AGENT, people)
    assert report.imported == 1
    record = await store.get_record_by_ref(AGENT.id, "export-1")
    assert record is not None
    assert record.created_at == datetime(2026, 3, 4, 17, 30, tzinfo=UTC)
    assert id_time(record.id) == record.created_at  # the id's time part is the line's time
    assert record.participant_ids == (people.ids["Ann"], people.ids["Bo"])
    assert (record.channel, record.importance, record.tags, record.kind) == (
        "discord:general",
        7,
        ("travel",),
        "imported",
    )
    assert record.sensitivity is Sensitivity.CONFIDENTIAL
    assert record.conversation_id is not None and len(record.message_ids) == 2
    dialog = await store.recent_messages(AGENT.id, record.conversation_id, 10)
    assert [(m.speaker_name, m.person_id, m.text) for m in dialog] == [
        ("Ann", people.ids["Ann"], "Shall we do the Kesch ridge?"),
        ("Ada", None, "Yes, start early."),  # the agent's own lines are its own
    ]
    conversation = await store.get_conversation(AGENT.id, record.conversation_id)
    assert conversation is not None and conversation.kind == "imported"
    # The id the consolidator derives for this conversation: closing it later (housekeeping)
    # finds it already remembered instead of summarising it again.
    assert record.id == derived_id(conversation.started_at, conversation.id, "memory")


async def test_reimporting_never_duplicates(store: FullStore, tmp_path: Path) -> None:
    no_ref = {
        "time": "2026-03-05T10:00:00Z",
        "channel": "terminal:terminal",
        "summary": "I met Cy.",
        "participants": [],
    }
    path = _write(tmp_path / "h.jsonl", GOOD, no_ref, {**GOOD, "summary": "Same ref, other text."})
    first = await import_jsonl(path, store, HashEmbedder(), AGENT, People(store))
    assert (first.imported, first.duplicates) == (2, 1)  # the third line repeats the first's ref
    again = await import_jsonl(path, store, HashEmbedder(), AGENT, People(store))
    assert (again.imported, again.duplicates) == (0, 3)
    assert await store.count_records(AGENT.id) == 2


async def test_embeds_in_batches_and_reports_progress(store: FullStore, tmp_path: Path) -> None:
    lines = [
        {"time": f"2026-03-0{1 + i % 9}T10:00:00Z", "channel": "web", "summary": f"Memory {i}", "ref": str(i)}
        for i in range(10)
    ]
    embedder = HashEmbedder()
    calls: list[tuple[int, int]] = []
    path = _write(tmp_path / "h.jsonl", *lines, "oops")
    report = await import_jsonl(
        path, store, embedder, AGENT, People(store), batch_size=4, progress=lambda d, t: calls.append((d, t))
    )
    assert report.imported == 10 and embedder.calls == 3
    assert calls[-1] == (10, 10)  # records: the bad line is reported, not counted
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert (await store.get_record_by_ref(AGENT.id, "3")) is not None
    assert (await store.get_record_by_ref(AGENT.id, "3")).channel == "import:web"  # type: ignore[union-attr]


async def test_an_unavailable_encoder_still_imports_for_keyword_recall(
    store: FullStore, tmp_path: Path
) -> None:
    report = await import_jsonl(
        _write(tmp_path / "h.jsonl", GOOD), store, UnavailableEmbedder(), AGENT, People(store)
    )
    assert (report.imported, report.without_vectors) == (1, 1)
    assert report.degraded is not None and "reindex" in report.degraded
    retriever = Retriever(store, UnavailableEmbedder(), MemoryConfig())
    ann = (await store.list_persons(AGENT.id))[0].id
    result = await retriever.retrieve(
        AGENT.id,
        "Kesch ridge hike",
        channel="discord:general",
        participants=[ann],
        now=NOW,
        budget_tokens=1000,
    )
    assert [s.record.ref for s in result.records] == ["export-1"]


async def test_an_unreadable_file_is_an_input_error(store: FullStore, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read import file"):
        await import_jsonl(tmp_path / "missing.jsonl", store, HashEmbedder(), AGENT, People(store))


async def test_progress_counts_records_never_bad_lines(store: FullStore, tmp_path: Path) -> None:
    """Bad lines before, between and after the records: the bar runs from 0 to the number of
    records, and a duplicate is a record done."""
    good = [
        {"time": "2026-03-01T10:00:00Z", "channel": "web", "summary": f"M{i}", "ref": str(i)}
        for i in range(5)
    ]
    path = _write(
        tmp_path / "h.jsonl", "oops", good[0], "[1]", good[1], good[2], good[2], "{", good[3], good[4], "x"
    )
    calls: list[tuple[int, int]] = []
    report = await import_jsonl(
        path,
        store,
        HashEmbedder(),
        AGENT,
        People(store),
        batch_size=2,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert (report.imported, report.duplicates, len(report.problems)) == (5, 1, 4)
    assert {total for _, total in calls} == {6}
    assert calls[-1] == (6, 6)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_a_speaker_contact_is_name_equals_contact() -> None:
    assert parse_speaker_contact(" Sam  Okafor = 01J9Z3K4W5X6Y7Z8A9B0C1D2E3 ", "--as") == SpeakerContact(
        name="Sam Okafor", contact="01J9Z3K4W5X6Y7Z8A9B0C1D2E3", where="--as"
    )
    assert parse_speaker_contact("a=b=c", "--as").contact == "b=c"  # split at the first "="
    for bad in ("Sam", "=Ann", "Sam=", " = "):
        with pytest.raises(InputError, match=r"^--as: .*use NAME=CONTACT"):
            parse_speaker_contact(bad, "--as")
    with pytest.raises(InputError, match="1 to 200 characters"):
        parse_speaker_contact("x" * 201 + "=Ann", "--as")


def test_a_mapping_file_is_one_speaker_contact_per_line(tmp_path: Path) -> None:
    path = tmp_path / "as.txt"
    path.write_text("\ufeff# who is who\nSam=Ann\n\n  Bo = 01J9Z3K4W5X6Y7Z8A9B0C1D2E3\n")
    assert read_speaker_contacts(path) == [
        SpeakerContact(name="Sam", contact="Ann", where=f"{path}:2"),
        SpeakerContact(name="Bo", contact="01J9Z3K4W5X6Y7Z8A9B0C1D2E3", where=f"{path}:4"),
    ]
    path.write_text("Sam=Ann\nnonsense\n")
    with pytest.raises(InputError, match=f"^{path}:2: 'nonsense': use NAME=CONTACT"):
        read_speaker_contacts(path)
    path.write_bytes(b"Sam=\xff\n")
    with pytest.raises(InputError, match="not valid UTF-8"):
        read_speaker_contacts(path)
    with pytest.raises(InputError, match="cannot read"):
        read_speaker_contacts(tmp_path / "missing.txt")
