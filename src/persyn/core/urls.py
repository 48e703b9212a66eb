"""Database and bus URLs as errors, logs and `persyn doctor` show them: never a password."""

from __future__ import annotations

import re

__all__ = ["masked_url"]

_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def masked_url(url: str) -> str:
    """`url` with everything before the last '@' after its scheme (user and password,
    however malformed: a broken URL may split its password anywhere) replaced by `***`,
    and a `password=` query value too. A SQLite URL names a file, never a secret, and is
    shown whole."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    if separator and scheme.split("+")[0].lower() == "sqlite":
        return url
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return scheme + separator + _QUERY_PASSWORD.sub(r"\1***", rest)
