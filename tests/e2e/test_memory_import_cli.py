"""`persyn memory import` as a newcomer meets it (issue 15 items 4e, 4f, 6): exit codes that
tell a clean import from rejected lines from a failure, bad lines reported apart from the
records (the count and the first few), a progress bar that counts records, `memory stats` as a
table, and `--as NAME=CONTACT`, which makes imported history the operator's own."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e

LOGIN = {"LOGNAME": "alice", "USER": "alice"}


def _line(ref: str, summary: str, **more: Any) -> str:
    base = {"time": "2026-01-05T10:00:00Z", "channel": "terminal:terminal", "summary": summary, "ref": ref}
    return json.dumps({**base, **more})


def test_exit_codes_bad_lines_and_progress(persyn: Persyn, tmp_path: Path) -> None:
    good = [_line(str(i), f"Memory number {i}.", participants=["Sam"]) for i in range(3)]
    bad = ["{broken", '["a list"]', json.dumps({"time": "soon"}), "{", "[]", "null", "7"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([bad[0], good[0], *bad[1:4], good[1], *bad[4:], good[2]]) + "\n")

    first = persyn.run("memory", "import", str(mixed))
    assert first.returncode == 0, first.stderr  # every good line is in; the bad ones reported apart
    assert "imported 3, already present 0, rejected 7" in first.stdout
    assert "3/3" in first.stdout and "10/10" not in first.stdout  # the bar counts records
    assert f"rejected 7 lines of {mixed} (the first 5):" in first.stderr
    for number in (1, 3, 4, 5, 7):
        assert f"{mixed}:{number}: " in first.stderr
    assert f"{mixed}:8:" not in first.stderr and "and 2 more" in first.stderr
    again = persyn.run("memory", "import", "--strict", str(mixed))
    assert again.returncode == 1 and "imported 0, already present 3, rejected 7" in again.stdout

    clean = tmp_path / "clean.jsonl"
    clean.write_text("\n".join(good) + "\n")
    present = persyn.run("memory", "import", str(clean))
    assert present.returncode == 0, present.stderr
    assert "imported 0, already present 3, rejected 0" in present.stdout and present.stderr == ""
    missing = persyn.run("memory", "import", str(tmp_path / "nowhere.jsonl"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    helped = " ".join(persyn.run("memory", "import", "--help", COLUMNS="200").stdout.split())
    assert (
        "Exit codes: 0 when every good line was imported or already present (rejected lines are "
        "reported on stderr, apart from the summary); 1 with --strict when some lines were rejected" in helped
    )
    assert "2 when nothing could be imported" in helped


def test_stats_is_a_table_and_json_on_request(persyn: Persyn, tmp_path: Path) -> None:
    empty = persyn.run("memory", "stats")
    assert empty.returncode == 0 and empty.stdout.startswith("Ada has no memories yet")
    history = tmp_path / "h.jsonl"
    history.write_text(
        "\n".join(
            [
                _line("a", "One.", importance=9),
                _line("b", "Two.", channel="slack:general", sensitivity="public"),
                _line("c", "Three.", time="2026-01-07T10:00:00Z"),
            ]
        )
        + "\n"
    )
    assert persyn.run("memory", "import", str(history)).returncode == 0
    shown = persyn.run("memory", "stats")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "Ada has 3 memories, from 2026-01-05 10:00 to 2026-01-07 10:00 UTC."
    assert not shown.stdout.lstrip().startswith("{")
    rows = {tuple(line.split()) for line in lines}
    assert ("terminal:terminal", "2") in rows and ("slack:general", "1") in rows
    assert ("private", "2") in rows and ("public", "1") in rows
    assert ("9", "1") in rows and ("5", "2") in rows
    assert ("without", "a", "vector", "0") in rows
    stats = json.loads(persyn.run("memory", "stats", "--json").stdout)
    assert stats["count"] == 3 and stats["by_channel"] == {"slack:general": 1, "terminal:terminal": 2}


def test_imported_history_attributed_to_the_operator_is_remembered_as_theirs(
    persyn: Persyn, tmp_path: Path
) -> None:
    script = tmp_path / "mind.json"
    rules = [
        {
            "task": "extract",
            "output": {"observations": [{"person": "Sam", "kind": "craft", "value": "builds violins"}]},
        },
        {"task": "dossier", "reply": "I know alice builds violins."},
    ]
    script.write_text(json.dumps({"rules": rules}))
    env = {**LOGIN, "PERSYN_MODELS__DEFAULT": f"test:script@{script}"}
    assert persyn.run("chat", input="hello\n", env=env).returncode == 0
    (me,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    assert me["display_name"] == "alice"
    dialog = [
        {"speaker": "Sam", "text": "I build violins in my workshop in Cremona."},
        {"speaker": "Ada", "text": "How wonderful."},
    ]
    history = tmp_path / "mine.jsonl"
    history.write_text(
        _line(
            "v",
            "Sam told me he builds violins in his workshop in Cremona.",
            participants=["Sam"],
            dialog=dialog,
        )
        + "\n"
        + _line("t", "Bo and I talked about tea.", participants=["Bo"], time="2026-01-06T10:00:00Z")
        + "\n"
    )
    refused = {
        "Sam=Zed": "has no contact named exactly 'Zed'",
        "Sam": "use NAME=CONTACT",
        "Ada=alice": "is Ada itself",
    }
    for mapping, why in refused.items():
        done = persyn.run("memory", "import", str(history), "--as", mapping)
        assert done.returncode == 2 and why in done.stderr, (mapping, done.stderr)
    assert json.loads(persyn.run("memory", "list", "--json").stdout) == []

    mapping = tmp_path / "who.txt"
    mapping.write_text("# my own export\nSam = alice\n")
    done = persyn.run(
        "memory",
        "import",
        str(history),
        "--as-file",
        str(mapping),
        "--extract",
        "--budget",
        "100000",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "imported 2, already present 0, rejected 0" in done.stdout
    people = {p["display_name"]: p["id"] for p in json.loads(persyn.run("contacts", "list", "--json").stdout)}
    assert sorted(people) == ["Bo", "alice"]  # no contact called Sam; Bo is one of his own

    recalled = persyn.run("memory", "recall", "violins workshop", "--participant", "alice", "--json")
    assert [r["ref"] for r in json.loads(recalled.stdout)][:1] == ["v"]
    assert json.loads(persyn.run("memory", "recall", "violins", "--participant", "Bo", "--json").stdout) == []
    observed = json.loads(persyn.run("people", "observations", "alice", "--json").stdout)
    assert [o["value"] for o in observed["observations"]] == ["builds violins"]
    assert persyn.run("people", "dossier", "alice").stdout.strip() == "I know alice builds violins."
    shown = json.loads(persyn.run("contacts", "show", "alice", "--json").stdout)
    assert any(c["conversation"]["kind"] == "imported" for c in shown["conversations"])

    # "The agent remembers me": the next chat's retrieval brings the imported memory up.
    record_id = json.loads(recalled.stdout)[0]["id"]
    chat = persyn.run("chat", input="Do you remember my violins workshop?\n", env=env)
    assert chat.returncode == 0, chat.stderr
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        flags = [json.loads(v) for (v,) in db.execute("SELECT value FROM flags WHERE key LIKE 'recalled:%'")]
    assert any(record_id in ids for ids in flags)
