"""Exact accounting from the ledger: dedup by id, grouping, `since`, malformed lines."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from usage_fakes import AT, make_record

from persyn.core.errors import InputError
from persyn.usage.jsonl import JsonlAdapter, record_line
from persyn.usage.ledger import LedgerRow, render_summary, summarize
from persyn.usage.records import UsageRecord


def write(path: Path, *records: UsageRecord) -> None:
    adapter = JsonlAdapter(path)
    for record in records:
        adapter.handle(record)
    adapter.close()


def test_the_same_record_twice_counts_once(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    record = make_record(cost_usd=0.25)
    write(path, record, record, make_record(stage="critique", cost_usd=0.5))
    report = summarize(path, by="stage")
    assert report.records == 2
    assert report.duplicates == 1
    assert report.total.calls == 2
    assert report.total.cost_usd == pytest.approx(0.75)
    assert [(row.key, row.calls) for row in report.rows] == [("critique", 1), ("respond", 1)]


def test_grouping_and_none_aware_cost(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    write(
        path,
        make_record(conversation_id="c1", model="anthropic:x", cost_usd=0.1, cache_read_tokens=40),
        make_record(conversation_id="c1", model="test:echo", cost_usd=None),
        make_record(conversation_id=None, model="test:echo", cost_usd=None, input_tokens=7),
    )
    by_conversation = summarize(path, by="conversation")
    assert {row.key: (row.calls, row.unpriced_calls, row.cost_usd) for row in by_conversation.rows} == {
        "c1": (2, 1, pytest.approx(0.1)),
        "(none)": (1, 1, None),
    }
    by_model = summarize(path, by="model")
    echo = next(row for row in by_model.rows if row.key == "test:echo")
    assert echo == LedgerRow(key="test:echo", calls=2, unpriced_calls=2, input_tokens=107, output_tokens=20)
    assert by_model.total.cache_read_tokens == 40
    assert {row.key for row in summarize(path, by="agent").rows} == {"01J9Z3K4W5X6Y7Z8A9B0C1D2E3"}
    assert {row.key for row in summarize(path, by="channel").rows} == {"tty"}


def test_malformed_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    good = make_record()
    path.write_bytes(record_line(good) + b'{"id": "torn\n' + b"not json at all\n\n" + b'{"id": "x"}\n')
    report = summarize(path)
    assert (report.records, report.malformed_lines) == (1, 3)


def test_since_filters_by_time(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    write(path, make_record(at=AT - timedelta(days=2)), make_record(at=AT))
    assert summarize(path, since=AT - timedelta(hours=1)).records == 1
    assert summarize(path, since=(AT - timedelta(hours=1)).replace(tzinfo=None)).records == 1  # naive = UTC
    assert summarize(path).records == 2


def test_missing_ledger_is_empty(tmp_path: Path) -> None:
    report = summarize(tmp_path / "absent.jsonl")
    assert (report.records, report.rows, report.total.cost_usd) == (0, (), None)


def test_unknown_grouping_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"'thread'.*stage, model, channel, conversation, agent"):
        summarize(tmp_path / "usage.jsonl", by="thread")


def test_render_summary_shows_unpriced_calls_as_counted(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    record = make_record(cost_usd=0.0123)
    write(path, record, record, make_record(stage="rate", cost_usd=None))
    text = render_summary(summarize(path))
    lines = text.splitlines()
    assert lines[0].split() == [
        "stage",
        "calls",
        "unpriced",
        "input",
        "output",
        "cache",
        "read",
        "cache",
        "write",
        "cost",
        "USD",
    ]
    assert lines[2].split() == ["respond", "1", "0", "100", "10", "0", "0", "0.012300"]
    assert lines[3].split() == ["rate", "1", "1", "100", "10", "0", "0", "-"]
    assert lines[5].split() == ["total", "2", "1", "200", "20", "0", "0", "0.012300"]
    assert "1 re-emitted record(s) counted once" in text
    assert "1 call(s) unpriced" in text


def test_one_agents_calls_only(tmp_path: Path) -> None:
    """`persyn usage --agent NAME`: another agent's calls, and calls attributed to no agent,
    are left out of every row and of the total; the report says whose it is."""
    path = tmp_path / "usage.jsonl"
    ada, bob = "01J9Z3K4W5X6Y7Z8A9B0C1D2E3", "01J9Z3K4W5X6Y7Z8A9B0C1D2E4"
    write(
        path,
        make_record(agent_id=ada, cost_usd=0.25),
        make_record(agent_id=ada, stage="critique", cost_usd=0.5),
        make_record(agent_id=bob, cost_usd=2.0, input_tokens=900),
        make_record(agent_id=None, stage="embed", cost_usd=None),
    )
    report = summarize(path, by="stage", agent_id=ada)
    assert report.agent_id == ada
    assert [(row.key, row.calls) for row in report.rows] == [("critique", 1), ("respond", 1)]
    assert (report.total.calls, report.total.input_tokens) == (2, 200)
    assert report.total.cost_usd == pytest.approx(0.75)
    assert summarize(path, by="agent", agent_id=bob).rows[0].key == bob
    everyone = summarize(path, by="agent")
    assert everyone.agent_id is None and everyone.total.calls == 4


def test_grouping_by_what_triggered_each_call(tmp_path: Path) -> None:
    """`trigger` is written when known and left out of a line when not, so a ledger written
    before it existed reads as before: those calls group under "(none)"."""
    path = tmp_path / "usage.jsonl"
    before = make_record(input_tokens=5)
    assert b"trigger" not in record_line(before)
    write(
        path,
        make_record(trigger="message", input_tokens=10),
        make_record(trigger="message", input_tokens=20),
        make_record(trigger="heartbeat", input_tokens=40),
        make_record(trigger="consolidation", input_tokens=80),
        before,
    )
    assert b'"trigger":"heartbeat"' in path.read_bytes().replace(b" ", b"")
    report = summarize(path, by="trigger")
    assert {row.key: (row.calls, row.input_tokens) for row in report.rows} == {
        "message": (2, 30),
        "heartbeat": (1, 40),
        "consolidation": (1, 80),
        "(none)": (1, 5),
    }
