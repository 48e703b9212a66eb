"""When reminders fire (SPEC §4.7): one-shot, interval and cron triggers in UTC, rolling
forward past missed fires, and clear errors for triggers that cannot work."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persyn.core.errors import InputError
from persyn.schedule import (
    AtTrigger,
    CronTrigger,
    IntervalTrigger,
    at_trigger,
    cron_trigger,
    describe_trigger,
    fire_key,
    first_fire_at,
    interval_trigger,
    is_recurring,
    next_fire_after,
)

NOW = datetime(2026, 3, 28, 22, 30, tzinfo=UTC)  # the eve of Europe's clocks going forward


def test_a_one_shot_trigger_fires_once() -> None:
    trigger = at_trigger(NOW + timedelta(hours=1), NOW)
    assert trigger == AtTrigger(at=NOW + timedelta(hours=1))
    assert first_fire_at(trigger, NOW) == NOW + timedelta(hours=1)
    assert next_fire_after(trigger, NOW + timedelta(hours=1), NOW + timedelta(hours=1)) is None
    assert not is_recurring(trigger)


def test_times_in_other_zones_and_naive_times_are_stored_as_utc() -> None:
    berlin = timezone(timedelta(hours=1))
    assert at_trigger(datetime(2026, 3, 29, 9, 0, tzinfo=berlin), NOW).at == datetime(
        2026, 3, 29, 8, tzinfo=UTC
    )
    naive = at_trigger(datetime(2026, 3, 29, 9, 0), NOW)
    assert naive.at == datetime(2026, 3, 29, 9, tzinfo=UTC) and naive.at.tzinfo is UTC


def test_a_one_shot_trigger_in_the_past_is_refused() -> None:
    with pytest.raises(InputError, match=r"'2026-03-28T22:00:00\+00:00' has already passed"):
        at_trigger(NOW - timedelta(minutes=30), NOW)
    with pytest.raises(InputError, match="already passed"):
        at_trigger(NOW, NOW)


def test_an_interval_fires_from_its_start_on_the_grid() -> None:
    trigger = interval_trigger(3600, NOW + timedelta(minutes=10))
    start = NOW + timedelta(minutes=10)
    assert first_fire_at(trigger, NOW) == start
    assert next_fire_after(trigger, start, start) == start + timedelta(hours=1)
    # Fired a little late: the next one stays on the grid, it does not drift.
    assert next_fire_after(trigger, start, start + timedelta(seconds=42)) == start + timedelta(hours=1)
    assert is_recurring(trigger)


def test_missed_fires_are_skipped_not_replayed() -> None:
    start = datetime(2026, 1, 1, 9, tzinfo=UTC)
    trigger = interval_trigger(3600, start)
    # The scheduler was down for two and a half days: the next fire is the next hour after now.
    now = start + timedelta(days=2, hours=12, minutes=5)
    assert next_fire_after(trigger, start, now) == start + timedelta(days=2, hours=13)
    cron = cron_trigger("0 9 * * *")
    assert next_fire_after(cron, start, now) == datetime(2026, 1, 4, 9, tzinfo=UTC)
    # Exactly on an occurrence: strictly after it.
    assert next_fire_after(trigger, start, start + timedelta(hours=5)) == start + timedelta(hours=6)


def test_cron_is_evaluated_in_utc_across_daylight_saving_changes() -> None:
    trigger = cron_trigger("30 1 * * *")  # 01:30 UTC, a time that does not exist in Berlin on 29 March
    fires = [first_fire_at(trigger, NOW)]
    for _ in range(3):
        fires.append(next_fire_after(trigger, fires[-1], fires[-1]))  # type: ignore[arg-type]
    assert fires == [datetime(2026, 3, d, 1, 30, tzinfo=UTC) for d in (29, 30, 31)] + [
        datetime(2026, 4, 1, 1, 30, tzinfo=UTC)
    ]
    assert all(f is not None and f.utcoffset() == timedelta(0) for f in fires)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", datetime(2026, 1, 1, 9, 7, 30, tzinfo=UTC), datetime(2026, 1, 1, 9, 15, tzinfo=UTC)),
        ("0 9 * * 1-5", datetime(2026, 11, 27, 9, 0, tzinfo=UTC), datetime(2026, 11, 30, 9, 0, tzinfo=UTC)),
        ("0 0 29 2 *", datetime(2026, 3, 1, tzinfo=UTC), datetime(2028, 2, 29, tzinfo=UTC)),
        ("@daily", datetime(2026, 1, 1, 0, 0, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)),
        ("@HOURLY", datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), datetime(2026, 1, 1, 1, tzinfo=UTC)),
    ],
)
def test_cron_next_matches(expression: str, after: datetime, expected: datetime) -> None:
    assert next_fire_after(cron_trigger(expression), after, after) == expected


def test_cron_expressions_are_normalised() -> None:
    assert cron_trigger("  0   9 * *  1-5 ") == CronTrigger(expression="0 9 * * 1-5")
    assert cron_trigger("@Weekly") == CronTrigger(expression="@weekly")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "the cron expression is empty"),
        ("0 9 * *", "has 4 fields; use five"),
        ("0 0 9 * * *", "has 6 fields; use five"),
        ("61 9 * * *", "invalid cron expression '61 9 \\* \\* \\*'"),
        ("0 25 * * *", "invalid cron expression"),
        ("every day", "has 2 fields"),
        ("0 0 30 2 *", "never matches a real date"),
        ("@reboot", "unknown cron alias '@reboot'"),
    ],
)
def test_bad_cron_expressions_are_refused(expression: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        cron_trigger(expression)


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        (59, "an interval of 59 seconds is out of range: use 60 seconds"),
        (0, "out of range"),
        (-3600, "out of range"),
        (10**12, "out of range"),
        (1.5, "must be a whole number of seconds, got 1.5"),
        (True, "must be a whole number"),
    ],
)
def test_bad_intervals_are_refused(seconds: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        interval_trigger(seconds, NOW)  # type: ignore[arg-type]


def test_descriptions_and_fire_keys() -> None:
    assert describe_trigger(AtTrigger(at=NOW)) == "once at 2026-03-28T22:30:00+00:00"
    assert describe_trigger(IntervalTrigger(every_seconds=60, start=NOW)) == (
        "every 60 seconds from 2026-03-28T22:30:00+00:00"
    )
    assert describe_trigger(CronTrigger(expression="@daily")) == "on cron '@daily' (UTC)"
    berlin = timezone(timedelta(hours=1))
    same_moment = NOW.astimezone(berlin)
    assert (
        fire_key("01J9Z3K4W5X6Y7Z8A9B0C1D2E3", NOW)
        == "01J9Z3K4W5X6Y7Z8A9B0C1D2E3@2026-03-28T22:30:00.000000Z"
    )
    assert fire_key("01J9Z3K4W5X6Y7Z8A9B0C1D2E3", same_moment) == fire_key("01J9Z3K4W5X6Y7Z8A9B0C1D2E3", NOW)


@given(
    every=st.integers(min_value=60, max_value=86_400 * 30),
    fired_offset=st.integers(min_value=-(10**7), max_value=10**8),
    late=st.integers(min_value=0, max_value=10**8),
)
def test_interval_roll_forward_properties(every: int, fired_offset: int, late: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    trigger = IntervalTrigger(every_seconds=every, start=start)
    fired_at = start + timedelta(seconds=fired_offset)
    now = fired_at + timedelta(seconds=late)
    following = next_fire_after(trigger, fired_at, now)
    assert following is not None
    assert following > fired_at and following > now  # strictly later than both
    assert following >= start
    assert (following - start) % timedelta(seconds=every) == timedelta(0)  # on the grid
    if following > start:  # and the first such point: the one before is not later than both
        assert following - timedelta(seconds=every) <= max(fired_at, now)
