"""Clocks. Everything that asks for the time takes a Clock, so tests can move it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "OffsetClock", "SystemClock", "friendly_datetime", "part_of_day"]


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to (tests, simulations, `--now`)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> None:
        self._now += delta

    def set(self, when: datetime) -> None:
        self._now = when


class OffsetClock:
    """The system clock shifted by a fixed offset: a simulated "now" that still moves in
    real time (`persyn run --now 2026-12-07T09:00`, for trying schedules and in tests)."""

    def __init__(self, now: datetime) -> None:
        start = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
        self.offset = start - datetime.now(UTC)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


def part_of_day(when: datetime) -> str:
    hour = when.hour
    if 5 <= hour < 12:
        return "morning"
    if 12 <= hour < 17:
        return "afternoon"
    if 17 <= hour < 21:
        return "evening"
    return "night"


def friendly_datetime(when: datetime) -> str:
    """'Monday 30 November 2026, 9:05 in the morning (UTC)' — SPEC §4 step 3."""
    hour12 = when.hour % 12 or 12
    tz = when.tzname() or "UTC"
    part = part_of_day(when)
    phrase = "at night" if part == "night" else f"in the {part}"
    return (
        f"{when.strftime('%A')} {when.day} {when.strftime('%B %Y')}, "
        f"{hour12}:{when.minute:02d} {phrase} ({tz})"
    )
