"""The README's two commands on a machine with nothing but the system's Python.

`make chat` and `make test` failed at once where uv was not installed ("make: uv: No such file or
directory"), and CI did not notice because it installed uv first. A run that skipped tests for a
missing server ended green without a word. Both are checked here with the real `make`, the
real system `python3` and the real pytest, in an environment reduced to `/usr/bin:/bin`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/bin:/bin"


def _bare_env(home: Path) -> dict[str, str]:
    """What `env -i HOME=... PATH=/usr/bin:/bin` leaves, plus the machine's certificate store
    (a TLS-inspecting proxy's CA lives only there; pip and uv read it from these)."""
    env = {"HOME": str(home), "PATH": SYSTEM_PATH}
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


@pytest.mark.skipif(shutil.which("python3", path=SYSTEM_PATH) is None, reason="no system python3")
@pytest.mark.skipif(shutil.which("make", path=SYSTEM_PATH) is None, reason="no system make")
def test_make_runs_uv_it_can_find_on_a_machine_with_only_the_system_python(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "Makefile", project / "Makefile")
    shutil.copy2(REPO / "scripts" / "bootstrap-uv", project / "scripts" / "bootstrap-uv")
    home = tmp_path / "home"
    home.mkdir()

    dry_run = subprocess.run(
        ["make", "-n", "install"],
        cwd=project,
        env=_bare_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert dry_run.returncode == 0, dry_run.stderr
    command = dry_run.stdout.strip().splitlines()[-1].split()
    assert command[1:] == ["sync", "--frozen"]
    uv = shutil.which(command[0], path=SYSTEM_PATH)
    assert uv is not None, f"make would run {command[0]!r}, which is not on {SYSTEM_PATH}"
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("uv ")
    if Path(uv).is_relative_to(project):  # installed by the bootstrap: once, then found again
        assert "installing it" in dry_run.stderr
        again = subprocess.run(
            ["make", "-n", "install"],
            cwd=project,
            env=_bare_env(home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.stdout.strip().splitlines()[-1].split()[0] == command[0]
        assert "installing it" not in again.stderr


def test_a_run_that_skips_for_a_missing_tool_ends_naming_it_and_how_to_install_it(tmp_path: Path) -> None:
    # Only the project's own environment on PATH: tmux (and every other system tool) is missing.
    env = {key: value for key, value in os.environ.items() if key != "CI" and not key.startswith("PYTEST")}
    env["PATH"] = str(Path(sys.executable).parent)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "tests/e2e/test_console_tmux.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    last_lines = run.stdout.strip().splitlines()[-2:]
    assert "skipped" in last_lines[-1]
    assert "this machine lacks tmux" in last_lines[0]
    assert "make test-deps" in last_lines[0]
