"""End-to-end tests drive the real `persyn` command in subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest
from persyn_cli import Persyn


@pytest.fixture
def persyn(tmp_path: Path) -> Persyn:
    runner = Persyn(home=tmp_path / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    done = runner.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    return runner
