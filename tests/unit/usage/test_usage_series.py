"""The ledger cut into day or hour buckets (the web console's usage chart): each bucket is
`summarize_records` of its own records, the whole is `summarize` over the same range."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from usage_fakes import AT, make_record

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.ledger import summarize, summarize_series
from persyn.usage.records import UsageRecord


def write(path: Path, *records: UsageRecord) -> None:
    adapter = JsonlAdapter(path)
    for record in records:
        adapter.handle(record)
    adapter.close()


def at(delta: timedelta, **changes: object) -> UsageRecord:
    return make_record(id=new_id(AT + delta), at=AT + delta, **changes)


def test_buckets_sum_to_the_whole_which_is_what_persyn_usage_sums(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    twice = at(timedelta(hours=1), input_tokens=5)
    write(
        path,
        at(-timedelta(days=2), input_tokens=1000),  # before the range
        at(timedelta(0), input_tokens=10, cost_usd=0.5),
        twice,
        twice,  # re-emitted: counted once, in its bucket and in the whole
        at(timedelta(hours=1, minutes=59), stage="critique", input_tokens=7),
        at(timedelta(days=1), input_tokens=20),
        at(timedelta(days=3), input_tokens=99),  # at or after `until`
    )
    since, until = AT - timedelta(hours=1), AT + timedelta(days=3)
    daily = summarize_series(path, by="stage", bucket="day", since=since, until=until)
    assert [b.start for b in daily.buckets] == [
        AT.replace(hour=0),
        AT.replace(hour=0) + timedelta(days=1),
    ]
    first = daily.buckets[0].report
    assert (first.total.calls, first.total.input_tokens) == (3, 22)
    assert daily.total.duplicates == 1  # the re-emitted line: reported once, on the whole
    assert {row.key: row.calls for row in first.rows} == {"respond": 2, "critique": 1}
    assert first.total.cost_usd == pytest.approx(0.502)  # 0.5 and two of the fakes' 0.001
    assert daily.total.total.input_tokens == 42 == sum(b.report.total.input_tokens for b in daily.buckets)
    # Without `until`, the whole is exactly `persyn usage --since`'s report.
    assert summarize_series(path, since=since).total == summarize(path, since=since)
    hourly = summarize_series(path, bucket="hour", since=since, until=until)
    assert [(b.start - AT, b.report.total.calls) for b in hourly.buckets] == [
        (timedelta(0), 1),
        (timedelta(hours=1), 2),
        (timedelta(days=1), 1),
    ]


def test_an_unknown_bucket_or_grouping_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="'week'"):
        summarize_series(tmp_path / "none.jsonl", bucket="week")
    with pytest.raises(InputError, match="'mood'"):
        summarize_series(tmp_path / "none.jsonl", by="mood")
    assert summarize_series(tmp_path / "none.jsonl").buckets == ()
