"""`records_since`: the recent tail of the usage ledger, read from the end back (the spend
guardrail reads it on every evaluation, so a months-long ledger must cost what its tail does)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from persyn.core.ids import new_id
from persyn.usage.ledger import read_records, records_since
from persyn.usage.records import UsageRecord

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _record(at: datetime, tokens: int) -> UsageRecord:
    return UsageRecord(
        id=new_id(at),
        at=at,
        agent_id="a",
        stage="respond",
        model="test:echo",
        tier="cheap",
        input_tokens=tokens,
    )


def test_the_tail_is_every_record_since_and_only_those(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    # 5,000 records a minute apart (~1 MB, many 64 KB blocks), two written out of order by a
    # few minutes (calls that overlapped), a torn line and a foreign one.
    records = [_record(T0 + timedelta(minutes=n), n) for n in range(5000)]
    records[4000], records[4001] = records[4001], records[4000]
    records.insert(4500, _record(T0 + timedelta(minutes=4495), 99))
    lines = [r.model_dump_json() for r in records]
    lines.insert(4200, '{"id": "torn')
    lines.insert(100, "not json at all")
    path.write_text("\n".join(lines) + "\n")

    since = T0 + timedelta(minutes=3990)
    tail = records_since(path, since)
    expected = [r for r in read_records(path) if r is not None and r.at >= since]
    assert tail == expected
    assert len(tail) == 5000 - 3990 + 1  # the late record counted once, the torn line skipped
    assert records_since(path, T0 + timedelta(days=30)) == []
    assert len(records_since(path, T0)) == 5001


def test_a_missing_or_empty_ledger_is_empty(tmp_path: Path) -> None:
    assert records_since(tmp_path / "none.jsonl", T0) == []
    (tmp_path / "empty.jsonl").write_text("")
    assert records_since(tmp_path / "empty.jsonl", T0) == []
