"""`persyn eval continuity --agent NAME` (issue 38): the week runs on a copy of a live
agent — its configuration and its whole store copied into the scratch home — and the live
deployment is only read: its files are byte-for-byte and its tables row-for-row the same
after the eval, while the copy starts from the people and memories the agent already had.
The live deployment is the session's shipped week (`shipped_week`, conftest.py)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]  # the shared week may run in it


def _digests(home: Path) -> dict[str, str]:
    return {
        str(path.relative_to(home)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(home.rglob("*"))
        if path.is_file() and path.suffix in (".db", ".toml", ".jsonl") and "traces" not in path.parts
    }


def _rows(database: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        tables = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
            )
        ]
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def _people(database: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return {name: pid for pid, name in db.execute("SELECT id, display_name FROM persons")}


def test_the_week_runs_on_a_copy_and_the_live_agent_is_untouched(
    tmp_path: Path, shipped_week: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    # The "live" deployment: the session's shipped week (conftest.py) left an agent that
    # knows Alice and Bob; it is only read, here as everywhere.
    made, root = shipped_week
    live_home = root / "week" / "home"
    live_db = live_home / "data" / "persyn.db"
    assert live_db.is_file(), made.stderr
    known = _people(live_db)
    assert {"Alice", "Bob"} <= set(known)
    files, rows = _digests(live_home), _rows(live_db)

    done = Persyn(live_home).run(
        "eval",
        "continuity",
        "--agent",
        "Wren",
        "--days",
        "1",
        "--json",
        "--work",
        str(tmp_path / "copy"),
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    shown = json.loads(done.stdout)
    assert len(shown["criteria"]) == 11

    assert _digests(live_home) == files  # byte for byte
    assert _rows(live_db) == rows
    copy_db = tmp_path / "copy" / "home" / "data" / "persyn.db"
    copied = _people(copy_db)
    # People the agent already knew keep their records (same ids), in the copy only.
    assert {name: copied[name] for name in ("Alice", "Bob")} == {n: known[n] for n in ("Alice", "Bob")}
    assert _rows(copy_db)["messages"] >= rows["messages"] > 0  # their dialog came along


def test_an_agent_the_deployment_does_not_have_is_a_usage_error(tmp_path: Path) -> None:
    persyn = Persyn(tmp_path / "live")
    assert persyn.run("init", "--name", "Wren").returncode == 0
    done = persyn.run("eval", "continuity", "--agent", "Nobody", "--work", str(tmp_path / "copy"))
    assert done.returncode == 2
    assert "--agent 'Nobody'" in done.stderr
    assert not (tmp_path / "copy").exists()
