"""The one parser of times given by an operator: the root `--now`, every `--since`, the web
console's `from`/`to`.

A time is ISO 8601 (naive means UTC). Where an option accepts a span (`--since 7d`), the span
reaches back from the command's clock, so a moved clock (`persyn --now ...`) moves the window
with it. Every result lies within the years ids can carry: ids hold their time as milliseconds
since 1970 (core/ids.py), and a year before datetime's end leaves room for the intervals added
to "now" (reminders, retention, TTLs).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from persyn.core.errors import InputError

__all__ = ["EARLIEST", "LATEST", "parse_time"]

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)

_SPAN_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(value: str, option: str, *, now: datetime | None = None) -> datetime:
    """`value` given for `option` as an aware UTC-or-offset datetime. With `now`, a span such
    as `30m`, `12h`, `7d` or `2w` is accepted too and means that long before `now`."""
    span = _span(value, option) if now is not None else None
    if span is not None and now is not None:
        try:
            parsed = now - span
        except OverflowError:
            raise InputError(
                f"invalid {option} {value!r}: that reaches before the year 1; use a shorter span"
            ) from None
    else:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            spans = " or a span like 30m, 12h, 7d, 2w" if now is not None else ""
            raise InputError(
                f"invalid {option} {value!r}: use ISO 8601, e.g. 2026-12-07T09:00{spans}"
            ) from exc
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        in_range = EARLIEST <= parsed < LATEST
    except OverflowError:  # an offset that pushes it past datetime's range
        in_range = False
    if not in_range:
        raise InputError(
            f"invalid {option} {value!r}: use a time from {EARLIEST:%Y-%m-%d} to before {LATEST:%Y-%m-%d}"
        )
    return parsed


def _span(value: str, option: str) -> timedelta | None:
    count, unit = value[:-1], value[-1:]
    if not (count.isdigit() and unit in _SPAN_UNITS):
        return None
    try:
        return timedelta(**{_SPAN_UNITS[unit]: int(count)})
    except OverflowError:
        raise InputError(f"invalid {option} {value!r}: that span is too long; use a shorter one") from None
