"""A meter adapter that keeps every usage record it is given, for asserting on ledgers."""

from __future__ import annotations

from persyn.usage.records import UsageRecord

__all__ = ["RecordingAdapter"]


class RecordingAdapter:
    def __init__(self) -> None:
        self.records: list[UsageRecord] = []

    def handle(self, record: UsageRecord) -> None:
        self.records.append(record)

    def close(self) -> None:
        pass
