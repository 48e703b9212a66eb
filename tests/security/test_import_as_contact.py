"""Issue 15 item 6: `persyn memory import --as NAME=CONTACT` attributes an imported speaker to
an existing contact (typically the operator). What is imported for them must then be theirs
exactly as if they had said it live — the same participants, so the same access rules
(memory/access.py) — and nobody else's: not a new contact's, not a stranger's who shares the
name, and never wider than the line's sensitivity allows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.memory.access import may_surface
from persyn.memory.importer import SpeakerContact
from persyn.ops.memory import MemoryOps, memory_ops
from persyn.store.base import Identity, Person, Provenance
from persyn.store.capabilities import FullStore, require_capability
from persyn.testing import harness_settings

START = datetime(2026, 3, 1, tzinfo=UTC)
LATER = datetime(2026, 4, 1, tzinfo=UTC)
TERMINAL = "terminal:terminal"


def _settings(home: Path) -> Settings:
    return harness_settings(home, agent=AgentConfig(name="Ada", id=new_id(START)))


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[tuple[MemoryOps, Person, Person]]:
    """The operator (as `persyn chat` makes them) and a stranger on discord called Sam."""
    settings = _settings(tmp_path / "home")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with memory_ops(settings, settings.agents[0]) as opened:
        agent_id = settings.agents[0].id
        operator = await opened.store.resolve_person(
            agent_id,
            Identity(service="terminal", channel="terminal", speaker_id="operator:alice"),
            "alice",
            "human",
            START,
        )
        stranger = await opened.store.resolve_person(
            agent_id, Identity(service="discord", channel="general", speaker_id="u-9"), "Sam", "human", START
        )
        yield opened, operator, stranger


def _write(path: Path, *lines: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


VIOLINS = {
    "time": "2025-05-01T10:00:00Z",
    "channel": TERMINAL,
    "participants": ["Sam"],
    "summary": "Sam told me he builds violins in his workshop.",
    "ref": "violins",
    "dialog": [
        {"speaker": "Sam", "text": "I build violins."},
        {"speaker": "Ada", "text": "Where is your workshop?"},
    ],
}


async def _recall(opened: MemoryOps, participants: list[str], channel: str = TERMINAL) -> list[str]:
    result = await opened.recall(
        "violins workshop",
        channel=channel,
        participants=participants,
        now=LATER,
        budget_tokens=2_000,
        limit=10,
    )
    return [s.record.ref or "" for s in result.records]


async def test_history_attributed_to_the_operator_is_theirs_as_if_said_live(
    ops: tuple[MemoryOps, Person, Person], tmp_path: Path
) -> None:
    opened, operator, stranger = ops
    agent_id = opened.agent.id
    path = _write(tmp_path / "mine.jsonl", VIOLINS)
    report = await opened.import_file(path, attributions=[SpeakerContact("Sam", operator.id, "--as")])
    assert (report.imported, report.problems) == (1, ())
    record = await opened.store.get_record_by_ref(agent_id, "violins")
    assert record is not None
    # The record and its dialog name the operator, as a live conversation with them would.
    assert record.participant_ids == (operator.id,)
    assert record.channel == TERMINAL and record.sensitivity is Sensitivity.PRIVATE
    said = await opened.store.recent_messages(agent_id, record.conversation_id or "", 10)
    assert [(m.person_id, m.speaker_name) for m in said] == [(operator.id, "Sam"), (None, "Ada")]
    conversation = await opened.store.get_conversation(agent_id, record.conversation_id or "")
    assert conversation is not None and conversation.participant_ids == (operator.id,)
    # Nobody new, and neither the operator's identities nor the stranger changed.
    people = {p.id: p for p in await opened.contacts.list_persons(agent_id)}
    assert set(people) == {operator.id, stranger.id}
    assert people[operator.id].identities == operator.identities
    assert [
        c.id
        for c in await require_capability(opened.store, FullStore).person_conversations(
            agent_id, operator.id, 5
        )
    ] == [conversation.id]
    assert (
        await require_capability(opened.store, FullStore).person_conversations(agent_id, stranger.id, 5) == []
    )
    # Recall: the operator alone is reminded; the stranger, present or alone, is not.
    assert await _recall(opened, [operator.id]) == ["violins"]
    assert await _recall(opened, [operator.id, stranger.id]) == []
    assert await _recall(opened, [stranger.id]) == []
    assert await _recall(opened, [operator.id], channel="discord:general") == []


async def test_each_level_surfaces_exactly_where_the_operators_own_words_would(
    ops: tuple[MemoryOps, Person, Person], tmp_path: Path
) -> None:
    """Every sensitivity, with an unmapped second speaker (Bo, who becomes a contact of his
    own): recall surfaces each imported record exactly where the policy lets the same words,
    said live by the operator and Bo on the terminal, surface."""
    opened, operator, stranger = ops
    agent_id = opened.agent.id
    lines = [
        {**VIOLINS, "participants": ["Sam", "Bo"], "sensitivity": level.value, "ref": level.value}
        for level in Sensitivity
    ]
    await opened.import_file(
        _write(tmp_path / "levels.jsonl", *lines), attributions=[SpeakerContact("sam", operator.id, "--as")]
    )
    (bo,) = [p for p in await opened.contacts.list_persons(agent_id) if p.display_name == "Bo"]
    assert bo.identities[0].service == "import"
    for level in Sensitivity:
        record = await opened.store.get_record_by_ref(agent_id, level.value)
        assert record is not None and record.participant_ids == (operator.id, bo.id)
    # What the operator and Bo said together on the terminal, live.
    formed = {
        level: Provenance(channel=TERMINAL, participant_ids=(operator.id, bo.id), sensitivity=level)
        for level in Sensitivity
    }
    for channel in (TERMINAL, "discord:general"):
        for present in ([], [operator.id], [operator.id, bo.id], [stranger.id], [operator.id, stranger.id]):
            expected = {lvl.value for lvl, p in formed.items() if may_surface(p, channel, present, [])}
            assert set(await _recall(opened, present, channel)) == expected, (channel, present)
    # Restricted: only in the same company; the operator alone does not hear what Bo was at.
    assert "restricted" not in await _recall(opened, [operator.id])
    assert "restricted" in await _recall(opened, [operator.id, bo.id])


async def test_an_unknown_or_ambiguous_contact_is_refused_before_anything_is_imported(
    ops: tuple[MemoryOps, Person, Person], tmp_path: Path
) -> None:
    opened, operator, stranger = ops
    agent_id = opened.agent.id
    twin = await opened.store.resolve_person(
        agent_id, Identity(service="signal", channel="dm", speaker_id="+41"), "alice", "human", START
    )
    path = _write(tmp_path / "mine.jsonl", VIOLINS)
    refusals = {
        "Zed": "no contact named exactly 'Zed'",
        "alice": f"2 contacts match 'alice': .*({operator.id}.*{twin.id}|{twin.id}.*{operator.id})",
        new_id(START): "no contact with id",
    }
    for contact, why in refusals.items():
        with pytest.raises(InputError, match=f"^--as: Sam={contact}: agent Ada.*{why}"):
            await opened.import_file(path, attributions=[SpeakerContact("Sam", contact, "--as")])
    with pytest.raises(InputError, match=r"'ada' is Ada itself"):
        await opened.import_file(path, attributions=[SpeakerContact("ada", operator.id, "--as")])
    with pytest.raises(InputError, match="one name is one contact"):
        await opened.import_file(
            path,
            attributions=[
                SpeakerContact("Sam", operator.id, "--as"),
                SpeakerContact(" SAM ", twin.id, "map:2"),
            ],
        )
    assert await opened.store.count_records(agent_id) == 0
    assert {p.id for p in await opened.contacts.list_persons(agent_id)} == {operator.id, stranger.id, twin.id}
    # Unmapped, the name goes to the one contact called exactly that: the stranger, not the operator.
    await opened.import_file(path)
    record = await opened.store.get_record_by_ref(agent_id, "violins")
    assert record is not None and record.participant_ids == (stranger.id,)
    assert await _recall(opened, [operator.id]) == []
