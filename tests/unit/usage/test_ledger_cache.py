"""`LedgerTail`: what a reader asking again sees is exactly what reading the ledger afresh
gives — appended lines, a line still being written, a replaced file, an earlier range."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from usage_fakes import AT, make_record

from persyn.core.ids import new_id
from persyn.usage.ledger import records_since
from persyn.usage.records import UsageRecord
from persyn.usage.tail import LedgerTail


def at(minutes: int) -> UsageRecord:
    moment = AT + timedelta(minutes=minutes)
    return make_record(id=new_id(moment), at=moment)


def line(record: UsageRecord) -> bytes:
    return (record.model_dump_json() + "\n").encode()


def ids(records: list[UsageRecord]) -> list[str]:
    return [record.id for record in records]


def test_a_reader_asking_again_sees_what_a_fresh_read_sees(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    old, first, second, third = at(-600), at(0), at(5), at(10)
    path.write_bytes(line(old) + line(first))
    tail = LedgerTail(path)
    since = AT - timedelta(minutes=1)
    assert ids(tail.since(since)) == [first.id]
    written = line(second)
    with path.open("ab") as out:  # a line still being written is not read yet
        out.write(written[:20])
    assert ids(tail.since(since)) == [first.id]
    with path.open("ab") as out:
        out.write(written[20:] + line(third) + line(third))  # and one re-emitted
    assert ids(tail.since(since)) == [first.id, second.id, third.id]
    assert ids(tail.since(since)) == ids(records_since(path, since))[:3]
    # A later range is served from what is kept; an earlier one reads the file again.
    assert ids(tail.since(AT + timedelta(minutes=5))) == [second.id, third.id]
    assert ids(tail.since(AT - timedelta(days=1))) == [old.id, first.id, second.id, third.id]


def test_a_replaced_or_missing_ledger_is_read_afresh(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    since = AT - timedelta(minutes=1)
    tail = LedgerTail(path)
    assert tail.since(since) == []  # no ledger yet: nothing metered
    first, other = at(0), at(1)
    path.write_bytes(line(first))
    assert ids(tail.since(since)) == [first.id]
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(line(other))
    replacement.replace(path)  # rotated or copied over: not an append
    assert ids(tail.since(since)) == [other.id]
