"""Fixtures of the console tests (the scripted mind lives in `kit.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from persyn.testing.models import registered_double

from .kit import Mind


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("console", instance):
        yield instance
