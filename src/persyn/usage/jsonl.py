"""Event-log metering adapter: one JSON line per usage record (SPEC App. C, "the ledger").

The file is the exact, once-only cost feed (`persyn usage` sums it), so it is its own file —
never the diagnostics log — and it must stay parseable when several processes (workers, a
`persyn send`) append at once. Each line is written with a single `os.write` on a descriptor
opened with `O_APPEND`, which the kernel positions atomically at the end of the file; a
buffered writer could split a long line across two writes and interleave it with another
process's line.
"""

from __future__ import annotations

import os
from pathlib import Path

from persyn.usage.records import UsageRecord

__all__ = ["JsonlAdapter", "record_line"]


def record_line(record: UsageRecord) -> bytes:
    """The record as one newline-terminated JSON line (newlines inside strings are escaped)."""
    return record.model_dump_json().encode("utf-8") + b"\n"


class JsonlAdapter:
    """Appends each record to `path` (created with its directory on first write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def handle(self, record: UsageRecord) -> None:
        line = record_line(record)
        fd = self._open()
        written = os.write(fd, line)
        while written < len(line):  # only on a full disk or a signal; finish the line
            written += os.write(fd, line[written:])

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return self._fd
