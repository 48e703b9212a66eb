"""Fixtures for gateway tests (helpers live in `gateway_fakes`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gateway_fakes import LoopbackServer, RecordingAdapter

from persyn.usage.meter import Meter


@pytest.fixture
def serve() -> Iterator[Callable[[Any], LoopbackServer]]:
    """Start servers for the test's duration: `server = serve(app)`."""
    started: list[LoopbackServer] = []

    def start(app: Any) -> LoopbackServer:
        server = LoopbackServer(app).__enter__()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.__exit__(None, None, None)


@pytest.fixture
def recorder() -> RecordingAdapter:
    return RecordingAdapter()


@pytest.fixture
def meter(recorder: RecordingAdapter) -> Iterator[Meter]:
    meter = Meter([recorder])
    yield meter
    meter.close()
