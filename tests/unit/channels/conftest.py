"""The session's IRC server (`irc_server.IrcServer`: Debian's ngircd on loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from irc_server import NGIRCD, IrcServer


@pytest.fixture(scope="session")
def ircd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrcServer]:
    if not Path(NGIRCD).exists():
        pytest.fail("ngircd is not installed (apt-get install ngircd; .ci/run does it)")
    server = IrcServer(tmp_path_factory.mktemp("ngircd"))
    server.start()
    yield server
    server.stop()
