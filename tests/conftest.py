"""Session-wide fixtures shared by the suites: the storage backends every store test runs on.

A backend is added by adding its name to `BACKENDS` and a branch to `_fresh_url`; nothing in
the tests themselves names a backend. PostgreSQL is a real server (`pgserver`), started once
per session on first use; each test gets a new, empty schema on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import needs
from persyn.testing.postgres import PostgresForTests
from persyn.testing.redis_server import REDIS_SERVER, RedisForTests

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresForTests]:
    """One real PostgreSQL (with pgvector) for the whole session, started on first use."""
    server = PostgresForTests()
    try:
        yield server
    finally:
        server.stop()


def _fresh_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'persyn.db'}"  # absolute: sqlite:////tmp/...
    if backend == "postgresql":
        server: PostgresForTests = request.getfixturevalue("postgres_server")
        return server.fresh_schema()
    raise AssertionError(f"no fresh-database recipe for backend {backend!r}")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database of each backend, not yet set up."""
    return _fresh_url(request.param, request, tmp_path)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisForTests]:
    """One real redis-server for the whole session, started on first use."""
    if not Path(REDIS_SERVER).exists():
        needs.missing("redis-server")
    server = RedisForTests(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after pytest's own short summary
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """One last line naming what this machine lacks, so a run that skipped for it is never
    silently green (see tests/needs.py)."""
    yield
    reasons = [
        str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        for report in terminalreporter.stats.get("skipped", [])
    ]
    skipped = [text for text in reasons if needs.INSTALL_HINT in text]
    if things := needs.missing_things(skipped):
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: this machine lacks {'; '.join(things)}. "
            "Run `make test-deps` as root (or `PERSYN_TEST_DEPS=sudo make test`) to install them.",
            yellow=True,
            bold=True,
        )
