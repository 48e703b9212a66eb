"""`LedgerTail`: the ledger's recent records parsed once per process, for a reader that asks
again and again (the web console's usage view).

The ledger is append-only JSONL: after the first read of a range, each call parses only the
bytes appended since, up to the last complete line (a line being written is read next time).
A file that shrank or was replaced (rotated, copied over) is read afresh. What is kept is
the records from the earliest `since` asked for, so memory follows the range a reader looks
at (a week at 1,000 calls a day: ~7,000 records). Parsing is the cost it saves: ~30 µs a
line on a loaded 2-core VM, against ~1 µs to filter a parsed record.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

from persyn.usage.ledger import HourlyRollup, LedgerSeries, parse_line, records_since
from persyn.usage.records import UsageRecord

__all__ = ["LedgerTail"]


class LedgerTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # called from worker threads
        self._start: datetime | None = None  # the records kept are those at or after it
        self._records: list[UsageRecord] = []
        self._ids: set[str] = set()
        self._offset = 0  # bytes of the file read so far (complete lines)
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file read
        self._rollups: dict[str, HourlyRollup] = {}  # by `by`, made on first ask, kept current

    def since(self, since: datetime) -> list[UsageRecord]:
        """The records at or after `since`, in ledger order, each id once."""
        with self._lock:
            self._refresh(since)
            return [record for record in self._records if record.at >= since]

    def series(
        self, *, by: str, bucket: str, since: datetime, until: datetime | None, agent_id: str | None
    ) -> LedgerSeries:
        """`summarize_series(path, since=since, ..., recent=self.since(since))`, from hourly
        roll-ups kept as records arrive (`HourlyRollup`) rather than summed per call."""
        with self._lock:
            self._refresh(since)
            rollup = self._rollups.get(by)
            if rollup is None:
                rollup = self._rollups[by] = HourlyRollup(by)
                for record in self._records:
                    rollup.add(record)
            return rollup.series(bucket=bucket, since=since, until=until, agent_id=agent_id)

    def _refresh(self, since: datetime) -> None:
        if self._start is None or since < self._start or not self._same_file():
            self._load(since)
        else:
            self._read_appended()

    def _same_file(self) -> bool:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return False
        return (stat.st_dev, stat.st_ino) == self._identity and stat.st_size >= self._offset

    def _load(self, since: datetime) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._start, self._records, self._ids, self._offset, self._identity = since, [], set(), 0, None
            self._rollups = {}
            return
        # The size first: what is appended while the tail is read back is read again next
        # time, and skipped then by its id.
        self._identity, self._offset = (stat.st_dev, stat.st_ino), self._complete(stat.st_size)
        self._records, self._ids, self._rollups = [], set(), {}
        for record in records_since(self.path, since):
            if record.id not in self._ids:  # a re-emitted line: its first copy is the record
                self._ids.add(record.id)
                self._records.append(record)
        self._start = since

    def _complete(self, size: int) -> int:
        """`size`, less a last line still being written."""
        if size == 0:
            return 0
        with self.path.open("rb") as handle:
            back = min(size, 64 * 1024)
            handle.seek(size - back)
            chunk = handle.read(back)
        cut = chunk.rfind(b"\n")
        return size - back + cut + 1 if cut >= 0 else size - back

    def _read_appended(self) -> None:
        size = self.path.stat().st_size
        if size <= self._offset:
            return
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            fresh = handle.read(size - self._offset)
        cut = fresh.rfind(b"\n")
        if cut < 0:
            return  # one line, still being written
        for line in fresh[: cut + 1].split(b"\n"):
            record = parse_line(line)
            if record is None or record.id in self._ids or self._start is None or record.at < self._start:
                continue
            self._ids.add(record.id)
            self._records.append(record)
            for rollup in self._rollups.values():
                rollup.add(record)
        self._offset += cut + 1
