"""The reliability and security suite: regressions found by adversarial runs (issue 13).

Each test here failed on the commit the adversarial run probed and passes after its fix;
later work keeps this directory green. Tests that drive the real CLI use the same `Persyn`
runner as `tests/e2e` and carry the `e2e` marker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from persyn_cli import Persyn


@pytest.fixture
def persyn(tmp_path: Path) -> Persyn:
    """A fresh deployment with one agent, Ada, answered by the `test:echo` double."""
    runner = Persyn(home=tmp_path / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    done = runner.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    return runner
