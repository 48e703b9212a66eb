"""Issue 13 item 16: a kill during `persyn memory import` could leave records without
their `message_ids` (41 of 5,000): the dialog was written line by line and the records
later, and a re-run linked only the messages it stored itself. A batch's dialog and
records are now one transaction with ids derived from the line, and a re-run completes
the links an older import left out."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.core.config import AgentConfig
from persyn.core.ids import derived_id, new_id
from persyn.core.records import MemoryRecord
from persyn.memory.importer import import_jsonl
from persyn.store import open_store
from persyn.store.base import Identity, Message, Role
from persyn.store.capabilities import FullStore
from persyn.store.ports.jobs import ConsolidationStatus
from persyn.testing.embedder import HashEmbedder

ENV = {"PERSYN_MEMORY__EMBEDDER": "test:hash"}
LINES = 3_000


def _line(i: int) -> dict[str, object]:
    return {
        "time": f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00Z",
        "channel": "discord:general",
        "participants": ["Ann"],
        "summary": f"Ann and I talked about chapter {i} of her novel.",
        "ref": f"novel-{i}",
        "dialog": [
            {"speaker": "Ann", "text": f"I rewrote chapter {i} again."},
            {"speaker": "Ada", "text": "What changed this time?"},
            {"speaker": "Ann", "text": "The ending, mostly."},
        ],
    }


def _counts(db_path: Path) -> tuple[int, int]:
    """(records, messages) stored so far."""
    if not db_path.exists():
        return 0, 0
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
            records = int(db.execute("SELECT count(*) FROM memory_records").fetchone()[0])
            messages = int(db.execute("SELECT count(*) FROM messages").fetchone()[0])
            return records, messages
    except sqlite3.OperationalError:  # not created yet, or busy: look again
        return 0, 0


def _under_way(db_path: Path) -> bool:
    """Progress is visible: a sixth of the records stored, or dialog stored ahead of its
    records (the window the older importer left open between the two)."""
    records, messages = _counts(db_path)
    return records >= LINES // 6 or messages > 3 * records


@pytest.mark.e2e
def test_a_kill_9_during_import_then_a_rerun_links_every_record(persyn: Persyn, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(_line(i)) + "\n" for i in range(LINES)))
    db_path = persyn.home / "data" / "persyn.db"
    importing = persyn.popen("memory", "import", str(path), **ENV)
    try:
        while not _under_way(db_path) and importing.poll() is None:
            time.sleep(0.005)  # until progress is visible
        assert importing.poll() is None, "the import finished before it could be killed"
        os.kill(importing.pid, signal.SIGKILL)
    finally:
        importing.wait()
    assert importing.returncode == -signal.SIGKILL
    assert _counts(db_path)[0] < LINES
    again = persyn.run("memory", "import", str(path), env=ENV)
    assert again.returncode == 0, again.stderr
    with sqlite3.connect(db_path) as db:
        records = db.execute("SELECT ref, conversation_id, message_ids FROM memory_records").fetchall()
        dialog: dict[str, list[str]] = {}
        for conversation_id, message_id in db.execute(
            "SELECT conversation_id, id FROM messages ORDER BY created_at, id"
        ):
            dialog.setdefault(conversation_id, []).append(message_id)
        conversations = db.execute("SELECT count(*), count(closed_at) FROM conversations").fetchone()
    assert len(records) == LINES
    unlinked = [
        ref for ref, conversation_id, ids in records if json.loads(ids) != dialog.get(conversation_id)
    ]
    assert unlinked == []
    assert all(len(ids) == 3 for ids in dialog.values())
    assert conversations == (LINES, LINES)  # one per line, all closed: none left behind


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


async def test_a_rerun_completes_the_links_an_older_import_left_out(store: FullStore, tmp_path: Path) -> None:
    """The state a kill left with the older importer: the dialog stored, the record
    stored by the re-run with only the messages that run added itself (here: none), the
    conversation open."""
    line = _line(7)
    ann = await store.resolve_person(
        AGENT.id, Identity(service="import", channel="discord:general", speaker_id="ann"), "Ann", "human", NOW
    )
    at = datetime(2025, 8, 8, 7, tzinfo=UTC)
    conversation = await store.open_conversation(
        AGENT.id,
        "import",
        "discord:general#novel-7",
        [ann.id],
        now=at,
        idle_timeout_seconds=0.0,
        kind="imported",
    )
    for index, said in enumerate(line["dialog"]):  # type: ignore[arg-type]
        assert isinstance(said, dict)
        await store.add_message(
            Message(
                id=derived_id(at, conversation.id, "imported", str(index)),
                agent_id=AGENT.id,
                conversation_id=conversation.id,
                role=Role.AGENT if said["speaker"] == "Ada" else Role.USER,
                person_id=None if said["speaker"] == "Ada" else ann.id,
                speaker_name=str(said["speaker"]),
                text=str(said["text"]),
                created_at=at,
                event_id=None,
            )
        )
    record = MemoryRecord(
        id=derived_id(at, conversation.id, "memory"),
        agent_id=AGENT.id,
        created_at=at,
        channel="discord:general",
        participant_ids=(ann.id,),
        summary=str(line["summary"]),
        conversation_id=conversation.id,
        message_ids=(),
        ref="novel-7",
        kind="imported",
    )
    await store.add_record(record, None, None)
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(line) + "\n")

    async def person(name: str, channel: str, seen_at: datetime) -> str:
        return ann.id

    report = await import_jsonl(path, store, HashEmbedder(), AGENT, person)
    assert (report.imported, report.duplicates, report.repaired) == (0, 1, 1)
    stored = await store.get_record_by_ref(AGENT.id, "novel-7")
    messages = await store.recent_messages(AGENT.id, conversation.id, 10)
    assert stored is not None and stored.message_ids == tuple(m.id for m in messages) and len(messages) == 3
    # The older importer also left the conversation open, for `persyn run` to close (and run
    # its model hooks on): the re-run closes it as of its last message, already remembered.
    settled = await store.get_conversation(AGENT.id, conversation.id)
    assert settled is not None and settled.closed_at == settled.last_activity_at
    state = await store.get_consolidation(AGENT.id, conversation.id)
    assert state is not None and (state.status, state.detail) == (ConsolidationStatus.DONE, "imported")
