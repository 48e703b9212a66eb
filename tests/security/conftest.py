"""The reliability and security suite: regressions found by adversarial runs (issue 13).

Each test here failed on the commit the adversarial run probed and passes after its fix;
later work keeps this directory green. Tests that drive the real CLI use the same `Persyn`
runner as `tests/e2e` and carry the `e2e` marker.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit" / "channels"))

from irc_server import IrcServer, running_ircd
from persyn_cli import Persyn


@pytest.fixture
def persyn(tmp_path: Path) -> Persyn:
    """A fresh deployment with one agent, Ada, answered by the `test:echo` double."""
    runner = Persyn(home=tmp_path / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    done = runner.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    return runner


@pytest.fixture(scope="session")
def ircd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrcServer]:
    """A real IRC server (Debian's ngircd) on loopback, for the tests whose stranger is on IRC."""
    yield from running_ircd(tmp_path_factory.mktemp("ngircd"))
