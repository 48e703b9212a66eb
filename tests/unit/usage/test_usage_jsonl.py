"""The event-log adapter: one parseable JSON line per record, safe for concurrent appenders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from usage_fakes import make_record

from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.records import UsageRecord


def test_each_record_is_one_json_line(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "usage.jsonl"
    adapter = JsonlAdapter(path)
    records = [
        make_record(stage="respond"),
        make_record(stage="critique", conversation_id="a\nb", cost_usd=None),
    ]
    for record in records:
        adapter.handle(record)
    adapter.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert [UsageRecord.model_validate(json.loads(line)) for line in lines] == records
    assert json.loads(lines[1])["cost_usd"] is None


def test_the_log_is_appended_not_truncated(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    for _ in range(2):
        adapter = JsonlAdapter(path)
        adapter.handle(make_record())
        adapter.close()
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2


WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, {helpers!r})
from usage_fakes import make_record
from persyn.usage.jsonl import JsonlAdapter
adapter = JsonlAdapter(Path({path!r}))
for _ in range(200):
    adapter.handle(make_record(stage="x" * 3000))  # long lines: beyond a small pipe/buffer size
adapter.close()
"""


def test_several_processes_appending_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    code = WRITER.format(helpers=str(Path(__file__).parent), path=str(path))
    writers = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0, 0, 0]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 800
    assert len({UsageRecord.model_validate_json(line).id for line in lines}) == 800
