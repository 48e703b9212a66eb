"""When reminders fire (SPEC §4.7): pure functions over the store's trigger types.

Every time is UTC — stored, compared and returned — and cron expressions are evaluated in
UTC, so there are no daylight-saving gaps or repeats to reason about.

- `AtTrigger(at)` fires once.
- `IntervalTrigger(every_seconds, start)` fires at `start + k * every_seconds`, k = 0, 1, …
- `CronTrigger(expression)` fires at every match of a standard five-field expression
  (minute hour day-of-month month day-of-week) or an alias (@hourly, @daily, @weekly,
  @monthly, @yearly/@annually).

`next_fire_after(trigger, fired_at, now)` is how a fired reminder rolls forward: the first
time strictly after both the fire time and now, so fires missed while nothing was running
are skipped, never replayed in a burst. Inputs from outside (a model's tool call) go through
`cron_trigger`, `interval_trigger` and `at_trigger`, which raise `InputError` with a message
that says what to change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from croniter import CroniterError, croniter

from persyn.core.errors import InputError
from persyn.store.base import AtTrigger, CronTrigger, IntervalTrigger, Trigger

__all__ = [
    "CRON_ALIASES",
    "MAX_INTERVAL_SECONDS",
    "MIN_INTERVAL_SECONDS",
    "at_trigger",
    "cron_trigger",
    "describe_trigger",
    "first_fire_at",
    "interval_trigger",
    "is_recurring",
    "next_fire_after",
    "utc",
]

MIN_INTERVAL_SECONDS = 60  # the scheduler's resolution; a tighter loop is a runaway risk
MAX_INTERVAL_SECONDS = 10 * 366 * 24 * 3600
CRON_ALIASES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")


def utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive time is taken to be UTC already (as `ManualClock` does)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def at_trigger(at: datetime, now: datetime) -> AtTrigger:
    """A one-shot trigger; a time that has passed is an InputError."""
    when = utc(at)
    if when <= utc(now):
        raise InputError(
            f"the time {when.isoformat()!r} has already passed (it is now {utc(now).isoformat()!r}); "
            "choose a time in the future"
        )
    return AtTrigger(at=when)


def interval_trigger(every_seconds: int, start: datetime) -> IntervalTrigger:
    """A trigger every `every_seconds` from `start` (its first fire)."""
    if isinstance(every_seconds, bool) or not isinstance(every_seconds, int):
        raise InputError(f"the interval must be a whole number of seconds, got {every_seconds!r}")
    if not MIN_INTERVAL_SECONDS <= every_seconds <= MAX_INTERVAL_SECONDS:
        raise InputError(
            f"an interval of {every_seconds!r} seconds is out of range: use {MIN_INTERVAL_SECONDS} "
            f"seconds (one minute) to {MAX_INTERVAL_SECONDS} seconds (about ten years)"
        )
    return IntervalTrigger(every_seconds=every_seconds, start=utc(start))


def cron_trigger(expression: str) -> CronTrigger:
    """A validated cron trigger: five fields or an alias, and at least one future match."""
    text = " ".join(expression.split())
    if not text:
        raise InputError("the cron expression is empty; e.g. '0 9 * * 1-5' (09:00 UTC on weekdays)")
    if text.startswith("@"):
        if text.lower() not in CRON_ALIASES:
            raise InputError(f"unknown cron alias {text!r}; use one of {', '.join(CRON_ALIASES)}")
        text = text.lower()
    elif len(text.split(" ")) != 5:
        raise InputError(
            f"cron expression {text!r} has {len(text.split(' '))} fields; use five: minute hour "
            "day-of-month month day-of-week, e.g. '30 8 * * *' (08:30 UTC daily)"
        )
    if not croniter.is_valid(text):
        raise InputError(
            f"invalid cron expression {text!r}: each field must be a number, range, list, step or '*' "
            "within its bounds (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-6)"
        )
    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterError:
        raise InputError(f"cron expression {text!r} never matches a real date") from None
    return CronTrigger(expression=text)


def first_fire_at(trigger: Trigger, now: datetime) -> datetime:
    """When a new reminder with `trigger`, set at `now`, first fires: an at-time or an
    interval's start as given (the scheduler fires an overdue one at once), a cron
    expression's first match after now."""
    if isinstance(trigger, AtTrigger):
        return utc(trigger.at)
    if isinstance(trigger, IntervalTrigger):
        return utc(trigger.start)
    return _cron_next(trigger.expression, utc(now))


def next_fire_after(trigger: Trigger, fired_at: datetime, now: datetime) -> datetime | None:
    """The next time after a fire at `fired_at`: strictly later than both `fired_at` and
    `now` (missed fires are skipped). None for a one-shot trigger: it is done."""
    after = max(utc(fired_at), utc(now))
    if isinstance(trigger, AtTrigger):
        return None
    if isinstance(trigger, IntervalTrigger):
        start = utc(trigger.start)
        if after < start:
            return start
        step = timedelta(seconds=trigger.every_seconds)
        return start + step * ((after - start) // step + 1)
    return _cron_next(trigger.expression, after)


def is_recurring(trigger: Trigger) -> bool:
    return not isinstance(trigger, AtTrigger)


def describe_trigger(trigger: Trigger) -> str:
    """A short phrase for people and models: 'once at …', 'every 3600 seconds from …'."""
    if isinstance(trigger, AtTrigger):
        return f"once at {utc(trigger.at).isoformat()}"
    if isinstance(trigger, IntervalTrigger):
        return f"every {trigger.every_seconds} seconds from {utc(trigger.start).isoformat()}"
    return f"on cron {trigger.expression!r} (UTC)"


def _cron_next(expression: str, after: datetime) -> datetime:
    """The first match strictly after `after`, in UTC (croniter never returns `after`)."""
    try:
        following = croniter(expression, after).get_next(datetime)
    except CroniterError as exc:
        raise InputError(f"cron expression {expression!r} cannot be evaluated: {exc}") from exc
    return utc(following)
