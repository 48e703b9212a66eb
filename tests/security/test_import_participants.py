"""Issue 13 item 6: a name in `memory import` / `memory recall --participant` resolved to
the earliest person with that display name, so a stranger who used "Ann" first inherited
Ann's imported private history. A name several contacts go by is now an error listing
them, as the agent's own tools do (tools/builtin/_contacts.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.ops.memory import MemoryOps, memory_ops
from persyn.store.base import Identity
from persyn.testing import harness_settings

START = datetime(2026, 3, 1, tzinfo=UTC)


def _settings(home: Path) -> Settings:
    return harness_settings(home, agent=AgentConfig(name="Ada", id=new_id(START)))


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[tuple[MemoryOps, str, str]]:
    """Two contacts called Ann: a stranger on discord met first, then the real Ann."""
    settings = _settings(tmp_path / "home")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with memory_ops(settings, settings.agents[0]) as opened:
        agent_id = settings.agents[0].id
        stranger = await opened.store.resolve_person(
            agent_id,
            Identity(service="discord", channel="general", speaker_id="u-666"),
            "Ann",
            "human",
            START,
        )
        ann = await opened.store.resolve_person(
            agent_id, Identity(service="signal", channel="dm", speaker_id="+4100"), "Ann", "human", START
        )
        yield opened, stranger.id, ann.id


async def test_an_ambiguous_name_in_an_import_is_a_line_error_listing_the_candidates(
    ops: tuple[MemoryOps, str, str], tmp_path: Path
) -> None:
    opened, stranger, ann = ops
    private = {"time": "2025-05-01T10:00:00Z", "channel": "signal:dm", "sensitivity": "restricted"}
    path = tmp_path / "history.jsonl"
    lines = [
        {**private, "participants": ["Ann"], "summary": "Ann told me about her diagnosis.", "ref": "a"},
        {**private, "participants": [ann], "summary": "Ann said the treatment works.", "ref": "b"},
        {**private, "participants": ["Bo"], "summary": "Bo, new to me, said hello.", "ref": "c"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = await opened.import_file(path)
    assert report.imported == 2
    [problem] = report.problems
    assert problem.line == 1
    assert "'Ann'" in problem.reason and stranger in problem.reason and ann in problem.reason
    assert await opened.store.get_record_by_ref(opened.agent.id, "a") is None
    by_id = await opened.store.get_record_by_ref(opened.agent.id, "b")
    assert by_id is not None and by_id.participant_ids == (ann,)
    # Nothing the stranger took part in holds Ann's history.
    for record in await opened.store.list_records(opened.agent.id):
        assert stranger not in record.participant_ids


async def test_an_ambiguous_participant_in_recall_is_an_error_listing_the_candidates(
    ops: tuple[MemoryOps, str, str],
) -> None:
    opened, stranger, ann = ops
    with pytest.raises(InputError) as caught:
        await opened.recall(
            "diagnosis", channel="signal:dm", participants=["Ann"], now=START, budget_tokens=500, limit=5
        )
    assert stranger in str(caught.value) and ann in str(caught.value)
    # By id, each is found; an unknown name is still refused.
    await opened.recall(
        "diagnosis", channel="signal:dm", participants=[ann], now=START, budget_tokens=500, limit=5
    )
    with pytest.raises(InputError, match="Zed"):
        await opened.recall("x", channel=None, participants=["Zed"], now=START, budget_tokens=500, limit=5)


async def test_a_name_is_never_matched_by_its_first_word(tmp_path: Path) -> None:
    """A stranger who calls themselves "Ann Evil" does not receive what is imported for
    "Ann", and `recall --participant Ann` does not recall as them (the agent's own tools may
    guess "Ann" → "Ann Evil" in conversation; the operator's history commands never do)."""
    settings = _settings(tmp_path / "home")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with memory_ops(settings, settings.agents[0]) as opened:
        agent_id = settings.agents[0].id
        stranger = await opened.store.resolve_person(
            agent_id, Identity(service="cli", channel="cli", speaker_id="evil"), "Ann Evil", "human", START
        )
        path = tmp_path / "history.jsonl"
        line = {
            "time": "2020-01-03T00:00:00Z",
            "channel": "cli:cli",
            "participants": ["Ann"],
            "summary": "Ann told me her diagnosis.",
            "sensitivity": "private",
            "ref": "a",
        }
        path.write_text(json.dumps(line) + "\n")
        report = await opened.import_file(path)
        assert report.imported == 1 and not report.problems
        record = await opened.store.get_record_by_ref(agent_id, "a")
        assert record is not None and stranger.id not in record.participant_ids
        (ann,) = [p for p in await opened.contacts.list_persons(agent_id) if p.display_name == "Ann"]
        assert record.participant_ids == (ann.id,)
        with pytest.raises(InputError, match="Ann Eve"):
            await opened.recall(
                "diagnosis",
                channel="cli:cli",
                participants=["Ann Eve"],
                now=START,
                budget_tokens=500,
                limit=5,
            )
