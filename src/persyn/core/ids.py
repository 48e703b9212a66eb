"""Time-sortable identifiers (SPEC §2): every conversation, message, event, record,
usage record and workflow carries a ULID. Ids arriving from outside are validated here."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from ulid import ULID

from persyn.core.errors import InputError

__all__ = ["derived_id", "id_time", "is_id", "new_id", "parse_id"]

_CROCKFORD = set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def new_id(at: datetime | None = None) -> str:
    """A fresh ULID as its canonical 26-character string; `at` fixes its timestamp part."""
    if at is None:
        return str(ULID())
    return str(ULID.from_datetime(at))


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
    after a crash is then counted exactly once by its consumers).
    """
    ms = int(at.timestamp() * 1000)
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=10).digest()
    return str(ULID.from_bytes(ms.to_bytes(6, "big") + digest))


def id_time(value: str) -> datetime:
    """The creation time encoded in a ULID."""
    return ULID.from_str(parse_id(value)).datetime.astimezone(UTC)
