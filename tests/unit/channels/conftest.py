"""The session's chat servers: IRC (`irc_server.IrcServer`: Debian's ngircd on loopback) and
Matrix (`matrix_server.Synapse`: PyPI's Synapse in its own venv), each started when a test asks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from irc_server import NGIRCD, IrcServer
from matrix_server import SYNAPSE_PYTHON, Synapse


@pytest.fixture(scope="session")
def ircd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrcServer]:
    if not Path(NGIRCD).exists():
        pytest.fail("ngircd is not installed (apt-get install ngircd; .ci/run does it)")
    server = IrcServer(tmp_path_factory.mktemp("ngircd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """Synapse from its own venv (.ci/run makes tests/servers/synapse/.venv); one per session."""
    if not SYNAPSE_PYTHON.exists():
        if os.environ.get("CI"):  # CI always makes it: a missing venv there is a broken CI, not a skip
            pytest.fail(f"no Synapse venv at {SYNAPSE_PYTHON.parent.parent}; .ci/run should have made it")
        pytest.skip(
            f"no Synapse venv at {SYNAPSE_PYTHON.parent.parent} (CI makes it: see the Matrix block of .ci/run)"
        )
    server = Synapse(tmp_path_factory.mktemp("synapse"))
    server.generate()
    server.start()
    try:
        yield server
    finally:
        server.stop()
