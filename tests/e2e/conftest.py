"""End-to-end tests drive the real `persyn` command in subprocesses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from persyn_cli import Persyn


@pytest.fixture
def persyn(tmp_path: Path) -> Persyn:
    runner = Persyn(home=tmp_path / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    done = runner.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    return runner


@pytest.fixture(scope="session")
def shipped_week(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The shipped continuity week, run once per session through `persyn eval continuity
    --json --report` (a few minutes of the real daemon); the tests that only read its outcome
    — its verdicts, its report, its scratch deployment — share it and never write to it.
    Returns the command's result and the root: `week/` (the work directory, its `home/`),
    `week.html`, and `operator/` (the operator's home, which the eval must not create)."""
    root = tmp_path_factory.mktemp("shipped-week")
    done = Persyn(root / "operator").run(
        "eval",
        "continuity",
        "--json",
        "--work",
        str(root / "week"),
        "--report",
        str(root / "week.html"),
        timeout=900,
    )
    return done, root
