"""Time-sortable identifiers (SPEC §2): every conversation, message, event, record,
usage record and workflow carries a ULID. Ids arriving from outside are validated here.

A ULID's 48-bit timestamp counts milliseconds from 1970, so it cannot encode an earlier
time, yet imported history (LoCoMo-style archives) goes back decades. An id for a time at
or before the epoch therefore has timestamp 0, and the 80 bits that are randomness in a
ULID carry instead 46 bits of milliseconds since 0001-01-01 UTC, then 34 bits of
randomness (or of the hash, for a derived id). Such ids are still 26-character ULIDs
(`is_id` accepts them); they sort by time among themselves and before every id of a later
time; `id_time` reads the time back. The price is fewer random bits for old times: two
ids made in the same millisecond of 1969 collide with probability 2**-34.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta

from ulid import ULID

from persyn.core.errors import InputError

__all__ = ["derived_id", "id_time", "is_id", "new_id", "parse_id"]

_CROCKFORD = set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OLD_ORIGIN = datetime(1, 1, 1, tzinfo=UTC)  # old times count from here (2**46 ms go past 1970)
_OLD_TIME_BITS = 46
_OLD_TAIL_BITS = 80 - _OLD_TIME_BITS
_MS = timedelta(milliseconds=1)


def _aware(at: datetime) -> datetime:
    # A naive time is local time, as datetime.timestamp() reads it.
    return at if at.tzinfo is not None else at.astimezone()


def _epoch_ms(at: datetime) -> int:
    """Milliseconds since 1970; the float form for later times keeps every id ever derived
    for them unchanged, exact integer arithmetic for earlier ones."""
    at = _aware(at)
    if at > _EPOCH:
        return int(at.timestamp() * 1000)
    return (at - _EPOCH) // _MS


def _ulid_bytes(at: datetime, tail: bytes) -> bytes:
    """The 16 bytes of an id for `at` whose non-time bits come from `tail` (10 bytes)."""
    ms = _epoch_ms(at)
    if ms > 0:
        return ms.to_bytes(6, "big") + tail
    old_ms = (_aware(at) - _OLD_ORIGIN) // _MS
    rest = int.from_bytes(tail, "big") >> _OLD_TIME_BITS
    return ((old_ms << _OLD_TAIL_BITS) | rest).to_bytes(16, "big")


def new_id(at: datetime | None = None) -> str:
    """A fresh ULID as its canonical 26-character string; `at` fixes its timestamp part
    (an old time is encoded as the module docstring says)."""
    if at is None:
        return str(ULID())
    if _epoch_ms(at) > 0:
        return str(ULID.from_datetime(at))
    return str(ULID.from_bytes(_ulid_bytes(at, os.urandom(10))))


def is_id(value: object) -> bool:
    if not isinstance(value, str) or len(value) != 26:
        return False
    upper = value.upper()
    # The first character carries the top bits of a 48-bit timestamp: at most "7".
    return set(upper) <= _CROCKFORD and upper[0] <= "7"


def parse_id(value: object, *, what: str = "id") -> str:
    """Validate an id that came from outside; return its canonical (upper-case) form.

    Raises InputError naming the offending value for anything that is not a ULID.
    """
    if not is_id(value):
        raise InputError(
            f"invalid {what} {value!r}: expected a 26-character ULID "
            "(Crockford base32, e.g. '01J9Z3K4W5X6Y7Z8A9B0C1D2E3')"
        )
    assert isinstance(value, str)
    return value.upper()


def derived_id(at: datetime, *parts: str) -> str:
    """A ULID whose timestamp is `at` and whose randomness is a hash of `parts`.

    Used where a retried operation must produce the *same* id (a usage record re-emitted
    after a crash is then counted exactly once by its consumers). A time at or before
    1970 gives an old-time id (module docstring): as deterministic, and as sortable.
    """
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=10).digest()
    return str(ULID.from_bytes(_ulid_bytes(at, digest)))


def id_time(value: str) -> datetime:
    """The creation time encoded in an id (to the millisecond; an old-time id's too)."""
    ulid = ULID.from_str(parse_id(value))
    if ulid.milliseconds > 0:
        return ulid.datetime.astimezone(UTC)
    old_ms = int.from_bytes(ulid.bytes, "big") >> _OLD_TAIL_BITS
    return _OLD_ORIGIN + old_ms * _MS
