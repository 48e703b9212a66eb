"""`LedgerTail.series`: the usage view from hourly roll-ups equals the record-by-record sum
(`summarize_series` over the same records) for every grouping, bucket, agent and range —
ranges that start and end mid-hour, calls repeated across hours, priced and unpriced calls,
records written out of order — and stays equal as the ledger grows."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.ids import new_id
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.ledger import BUCKETS, GROUP_BY, summarize_series
from persyn.usage.records import UsageRecord
from persyn.usage.tail import LedgerTail

T0 = datetime(2026, 11, 1, tzinfo=UTC)
AGENTS = ("01J9Z3K4W5X6Y7Z8A9B0C1D2E3", "01J9Z3K4W5X6Y7Z8A9B0C1D2E4")


def _records(rng: random.Random, start: datetime, count: int) -> list[UsageRecord]:
    made: list[UsageRecord] = []
    for n in range(count):
        at = start + timedelta(minutes=7 * n + rng.randint(-20, 20))  # some out of order
        made.append(
            UsageRecord(
                id=new_id(at),
                at=at,
                agent_id=rng.choice(AGENTS),
                stage=rng.choice(("respond", "critique:fears", "decide")),
                model=rng.choice(("anthropic:x", "test:echo")),
                tier="cheap",
                input_tokens=rng.randint(0, 900),
                output_tokens=rng.randint(0, 90),
                channel=rng.choice(("tty", None)),
                conversation_id=rng.choice(("c1", "c2", None)),
                trigger=rng.choice(("message", "heartbeat", None)),
                cost_usd=rng.choice((None, 0.000003 * rng.randint(1, 500))),
                # A logical call run again, sometimes hours later (a recovered step).
                call_id=rng.choice((None, None, f"call-{rng.randint(0, 60)}")),
            )
        )
    return made


def _write(path: Path, records: list[UsageRecord]) -> None:
    adapter = JsonlAdapter(path)
    for record in records:
        adapter.handle(record)
    adapter.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rolled_up_series_equal_the_record_by_record_sum(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "usage.jsonl"
    _write(path, _records(rng, T0, 600))  # ~3 days
    tail = LedgerTail(path)
    for round_ in range(2):
        for _ in range(6):
            since = T0 + timedelta(minutes=rng.randint(0, 3000))
            until = rng.choice((None, since + timedelta(minutes=rng.randint(0, 3000))))
            agent = rng.choice((None, *AGENTS))
            for by in GROUP_BY:
                for bucket in BUCKETS:
                    rolled = tail.series(by=by, bucket=bucket, since=since, until=until, agent_id=agent)
                    summed = summarize_series(
                        path,
                        by=by,
                        bucket=bucket,
                        since=since,
                        until=until,
                        agent_id=agent,
                        recent=tail.since(since),
                    )
                    assert rolled == summed, (round_, by, bucket, since, until, agent)
        if round_ == 0:  # the ledger grows: the roll-ups take the new records in
            _write(path, _records(rng, T0 + timedelta(days=3), 200))
