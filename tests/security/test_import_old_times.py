"""Issue 13 item 11: a time before 1970 in `persyn memory import` raised OverflowError (a
ULID cannot encode it) and lost the whole batch. Ids for old times sort and derive
deterministically (core/ids.py); a time out of any range is a line error
(test_import_limits.py)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from persyn_cli import Persyn

from persyn.core.ids import derived_id, id_time, is_id, new_id

_MS = timedelta(milliseconds=1)
# After 1970 an id keeps the float form it always had (`int(timestamp * 1000)`): it truncates
# to the millisecond below, and a float's rounding far in the future (the year 9999's timestamp
# in milliseconds has 31 µs steps) adds microseconds on the way in and on the way back.
_FLOAT_READ = _MS + timedelta(microseconds=100)
moments = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
).map(lambda at: at.replace(microsecond=at.microsecond // 1000 * 1000))


@given(moments, moments)
def test_ids_of_any_time_derive_sort_and_read_back(first: datetime, second: datetime) -> None:
    a, b = derived_id(first, "x"), derived_id(second, "y")
    assert is_id(a) and is_id(b) and is_id(new_id(first))
    assert derived_id(first, "x") == a  # replay-safe, old times too
    # To the millisecond: exact before 1970; after it, as the float form always read it.
    for moment, made in ((first, a), (second, b), (first, new_id(first))):
        assert abs(id_time(made) - moment) <= _FLOAT_READ
        if moment <= datetime(1970, 1, 1, tzinfo=UTC):
            assert id_time(made) == moment
    if first < second:
        assert id_time(a) <= id_time(b)
    if id_time(a) < id_time(b):
        assert a < b and new_id(first) < new_id(second)


def test_ids_around_the_epoch_keep_their_order() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    times = [epoch - _MS, epoch, epoch + _MS]
    ids = [derived_id(at, "same") for at in times]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert [id_time(i) for i in ids] == times


@pytest.mark.e2e
def test_pre_1970_lines_import_with_their_batch(persyn: Persyn, tmp_path: Path) -> None:
    lines: list[dict[str, object]] = [
        {
            "time": f"2020-01-{1 + i % 28:02d}T10:00:00Z",
            "channel": "archive",
            "summary": f"I sorted letter {i}.",
            "ref": f"l{i}",
        }
        for i in range(70)  # more than one batch of 64
    ]
    lines[3] = {
        "time": "1958-07-04T09:30:00Z",
        "channel": "archive",
        "summary": "Ann told me about her first day at school.",
        "ref": "old",
        "dialog": [{"speaker": "Ann", "text": "It was 1958."}, {"speaker": "Ada", "text": "Tell me more."}],
    }
    lines[5] = {
        "time": "0001-01-01T00:00:00Z",
        "channel": "archive",
        "summary": "Before time.",
        "ref": "first",
    }
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = persyn.run("memory", "import", str(path), PERSYN_MEMORY__EMBEDDER="test:hash")
    assert done.returncode == 0, done.stderr
    assert "imported 70, already present 0, rejected 0" in done.stdout, done.stderr
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        record_id, created, messages = db.execute(
            "SELECT id, created_at, message_ids FROM memory_records WHERE ref = 'old'"
        ).fetchone()
        stamps = db.execute("SELECT created_at FROM messages ORDER BY id").fetchall()
    assert created.startswith("1958-07-04 09:30:00") or created.startswith("1958-07-04T09:30:00")
    assert id_time(record_id) == datetime(1958, 7, 4, 9, 30, tzinfo=UTC)
    assert len(json.loads(messages)) == 2 and len(stamps) == 2
