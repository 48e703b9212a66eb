"""Issue 13 item 14: `persyn memory recall --queries FILE` raised tracebacks on a numeric
channel, `now` or participants and on a binary file, iterated a participants string per
character, and read `query: null` as the query "None". Each is now a clear error naming
the line and the field, before any query runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e

GOOD = {"id": "q1", "query": "violins"}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"id": "q2", "query": "violins", "channel": 42}, "channel"),
        ({"id": "q2", "query": "violins", "now": 1767225600}, "now"),
        ({"id": "q2", "query": "violins", "now": "next tuesday"}, "now"),
        ({"id": "q2", "query": "violins", "participants": 7}, "participants"),
        ({"id": "q2", "query": "violins", "participants": [7]}, "participants.0"),
        ({"id": "q2", "query": "violins", "participants": "Sam"}, "participants"),
        ({"id": "q2", "query": None}, "query"),
        ({"id": "q2"}, "query"),
        ({"query": "violins"}, "id"),
    ],
)
def test_a_bad_field_is_an_error_naming_line_and_field(
    persyn: Persyn, tmp_path: Path, bad: dict[str, object], field: str
) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(bad) + "\n")
    done = persyn.run("memory", "recall", "--queries", str(path), PERSYN_MEMORY__EMBEDDER="test:hash")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert f"{path}:3: {field}:" in done.stderr
    assert done.stdout == ""  # checked before any query runs


def test_a_binary_file_is_an_error_naming_the_line(persyn: Persyn, tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\x00\x01binary\n")
    done = persyn.run("memory", "recall", "--queries", str(path), PERSYN_MEMORY__EMBEDDER="test:hash")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"{path}:2: not valid UTF-8" in done.stderr


def test_good_lines_still_answer(persyn: Persyn, tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    lines = [GOOD, {"id": 2, "query": "violins", "channel": "terminal:terminal", "now": "2026-01-01T00:00"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = persyn.run("memory", "recall", "--queries", str(path), PERSYN_MEMORY__EMBEDDER="test:hash")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == ["q1", 2]
