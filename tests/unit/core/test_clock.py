from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.clock import ManualClock, friendly_datetime, part_of_day


@pytest.mark.parametrize(
    ("hour", "part"),
    [
        (5, "morning"),
        (11, "morning"),
        (12, "afternoon"),
        (16, "afternoon"),
        (17, "evening"),
        (20, "evening"),
        (21, "night"),
        (0, "night"),
        (4, "night"),
    ],
)
def test_part_of_day(hour: int, part: str) -> None:
    assert part_of_day(datetime(2026, 11, 30, hour, tzinfo=UTC)) == part


def test_friendly_datetime_reads_like_a_person_would_say_it() -> None:
    assert friendly_datetime(datetime(2026, 11, 30, 9, 5, tzinfo=UTC)) == (
        "Monday 30 November 2026, 9:05 in the morning (UTC)"
    )
    assert friendly_datetime(datetime(2026, 11, 30, 23, 40, tzinfo=UTC)).endswith("11:40 at night (UTC)")


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(datetime(2026, 1, 1))
    assert clock.now().tzinfo is UTC
    clock.advance(timedelta(days=7))
    assert clock.now() == datetime(2026, 1, 8, tzinfo=UTC)
