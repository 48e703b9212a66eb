"""Vectors as every backend stores them: scaled to unit length, packed as float32, so cosine
distance is unchanged and float32 arithmetic inside the index can neither overflow nor
underflow."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from persyn.core.errors import InputError

__all__ = ["MAX_DIMS", "check_dims", "unit_vector"]

MAX_DIMS = 8192  # sqlite-vec's limit for float vectors: a vector one backend accepts, all do


def check_dims(dims: int) -> int:
    """`dims`, if it is a vector size every backend accepts; InputError if not."""
    if not isinstance(dims, int) or not 1 <= dims <= MAX_DIMS:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InputError(f"vector dimensions {dims!r} out of range 1..{MAX_DIMS}")
    return dims


def unit_vector(vector: Sequence[float], what: str = "vector") -> bytes | None:
    """`vector` scaled to unit length as float32 bytes; None if it is all zeros.

    Raises InputError for an empty, oversized or non-finite vector."""
    values = [float(x) for x in vector]
    check_dims(len(values))
    if not all(math.isfinite(x) for x in values):
        raise InputError(f"{what} has a non-finite component (NaN or infinity)")
    norm = math.hypot(*values)
    if not math.isfinite(norm):  # finite components whose length overflows: rescale first
        largest = max(abs(x) for x in values)
        values = [x / largest for x in values]
        norm = math.hypot(*values)
    if norm == 0.0:
        return None
    return struct.pack(f"<{len(values)}f", *(x / norm for x in values))
