"""Issue 13 item 12: import had no field limits (a 5 MB summary took 5.7 GB; a
100,000-character name and 3,000 participants were accepted; NUL bytes were stored though
messages reject them). Every field is held to the limits of a live message, a line is
never read whole beyond `max_line_bytes`, and each bad line is reported by number while
the good ones import."""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.memory.importer import import_jsonl
from persyn.store import open_store
from persyn.store.base import Identity
from persyn.store.capabilities import FullStore
from persyn.testing.embedder import HashEmbedder

NOW = datetime(2026, 3, 10, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(NOW))


def _line(ref: str, **fields: object) -> str:
    base: dict[str, object] = {
        "time": "2026-01-05T10:00:00Z",
        "channel": "archive",
        "summary": f"I filed {ref}.",
    }
    return json.dumps({**base, "ref": ref, **fields})


@pytest.mark.e2e
def test_each_field_is_held_to_the_message_limits(persyn: Persyn, tmp_path: Path) -> None:
    bad = {
        2: _line("big-summary", summary="x" * 40_000),
        3: _line("long-name", participants=["A" * 100_000]),
        4: _line("crowd", participants=[f"P{i}" for i in range(3_000)]),
        5: _line("nul-summary", summary="I said\x00nothing."),
        6: _line("nul-dialog", dialog=[{"speaker": "Ann", "text": "hi\x00"}]),
        7: _line("nul-name", participants=["Ann\x00"]),
        8: _line("long-text", dialog=[{"speaker": "Ann", "text": "y" * 40_000}]),
        9: _line("tags", tags=[f"t{i}" for i in range(500)]),
        10: _line("long-channel", channel="c" * 5_000),
        11: _line("out-of-range", time="0001-01-01T00:00:00+05:00"),  # OverflowError before
        12: _line("flag-importance", importance=True),  # imported as importance 1 before
    }
    lines = [_line("good-1"), *bad.values(), _line("good-2")]
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = persyn.run("memory", "import", "--strict", str(path), PERSYN_MEMORY__EMBEDDER="test:hash")
    assert done.returncode == 1, done.stderr  # --strict: lines were rejected, the good ones imported
    assert f"imported 2, already present 0, rejected {len(bad)}" in done.stdout
    # The count, then the first few by number (the report holds every one: test_importer.py).
    assert f"rejected {len(bad)} lines of {path} (the first 5):" in done.stderr
    for number in sorted(bad)[:5]:
        assert f"{path}:{number}: " in done.stderr
    assert f"and {len(bad) - 5} more" in done.stderr
    assert "max_message_chars" in done.stderr
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        refs = {ref for (ref,) in db.execute("SELECT ref FROM memory_records")}
        names = [n for (n,) in db.execute("SELECT display_name FROM persons")]
        nul = db.execute("SELECT count(*) FROM messages WHERE instr(text, char(0)) > 0").fetchone()[0]
    assert refs == {"good-1", "good-2"}
    assert all(len(name) <= 200 for name in names) and len(names) < 100
    assert nul == 0


@pytest.mark.e2e
def test_a_5_mb_summary_is_a_line_error_and_its_neighbours_import(persyn: Persyn, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(
        "\n".join([_line("before"), _line("huge", summary="z" * 5_000_000), _line("after")]) + "\n"
    )
    done = persyn.run("memory", "import", str(path), PERSYN_MEMORY__EMBEDDER="test:hash")
    assert done.returncode == 0, done.stderr
    assert f"{path}:2: " in done.stderr and "imported 2" in done.stdout
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        refs = {ref for (ref,) in db.execute("SELECT ref FROM memory_records")}
    assert refs == {"before", "after"}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await opened.setup()
    await opened.ensure_agent(AGENT.id, AGENT.name, NOW)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_huge_line_is_never_held_in_memory(store: FullStore, tmp_path: Path) -> None:
    """Bounded memory, measured by allocation (not time): a 24 MB line costs at most about
    one read of `max_line_bytes` (4 MiB by default), not the line."""

    async def person(name: str, channel: str, seen_at: datetime) -> str:
        identity = Identity(service="import", channel=channel, speaker_id=name.lower())
        return (await store.resolve_person(AGENT.id, identity, name, "human", NOW)).id

    path = tmp_path / "history.jsonl"
    huge = _line("huge", dialog=[{"speaker": "Ann", "text": "w" * 30_000} for _ in range(800)])
    path.write_text("\n".join([_line("before"), huge, _line("after")]) + "\n")
    assert path.stat().st_size > 24_000_000
    limit = 4 * 1024 * 1024  # ImportLimits().max_line_bytes
    tracemalloc.start()
    try:
        report = await import_jsonl(path, store, HashEmbedder(), AGENT, person)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.imported == 2
    assert [(p.line, p.reason.split(" (")[0]) for p in report.problems] == [
        (2, f"line is longer than {limit} bytes")
    ]
    assert peak < 3 * limit, f"peak {peak} bytes"
