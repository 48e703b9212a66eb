"""The session's chat servers: IRC (`irc_server.IrcServer`: Debian's ngircd on loopback) and
Matrix (`matrix_server.Synapse`: PyPI's Synapse in its own venv), mail (`mail_server.MailServers`:
Debian's Dovecot and PyPI's aiosmtpd), each started when a test asks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from irc_server import IrcServer, running_ircd
from mail_server import MailServers, running_mail_servers
from matrix_server import SYNAPSE_PYTHON, Synapse

import needs


@pytest.fixture(scope="session")
def ircd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrcServer]:
    yield from running_ircd(tmp_path_factory.mktemp("ngircd"))


@pytest.fixture(scope="session")
def mail_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MailServers]:
    yield from running_mail_servers(tmp_path_factory.mktemp("mail"))


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """Synapse from its own venv (.ci/deps makes tests/servers/synapse/.venv); one per session."""
    if not SYNAPSE_PYTHON.exists():
        needs.missing(f"Synapse in its own venv ({SYNAPSE_PYTHON.parent.parent})")
    server = Synapse(tmp_path_factory.mktemp("synapse"))
    server.generate()
    server.start()
    try:
        yield server
    finally:
        server.stop()
