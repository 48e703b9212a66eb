"""Configuration that hands the host or the operator's reach to strangers (issue 33, item 13):
a sandbox that may write the whole host (`host_dir = "/"`, `rw`) or the deployment itself is
refused at load, naming the key; `cors_origins = ["*"]` while an operator key exists fails
`persyn doctor` with the reason. All were accepted silently on 4c92b50."""

from __future__ import annotations

from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.core.config import load_settings
from persyn.core.errors import ConfigError


def _write(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(text, encoding="utf-8")


def _error(home: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(home, environ={})
    return str(info.value)


@pytest.mark.parametrize("host_dir", ["/", "//", "/tmp/..", "/./"])
def test_a_sandbox_that_may_write_the_whole_host_is_refused(tmp_path: Path, host_dir: str) -> None:
    _write(tmp_path, f'[sandbox]\nhost_dir = "{host_dir}"\nhost_dir_mode = "rw"\n')
    message = _error(tmp_path)
    assert "sandbox" in message and repr(host_dir) in message and "whole host" in message, message


def test_a_sandbox_that_may_write_the_deployment_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "deployment" / "home"
    _write(home, f'[sandbox]\nhost_dir = "{tmp_path / "deployment"}"\nhost_dir_mode = "rw"\n')
    message = _error(home)
    assert "holds this deployment" in message and str(home) in message, message


@pytest.mark.parametrize(
    "sandbox",
    [
        '[sandbox]\nhost_dir = "/"\nhost_dir_mode = "ro"\n',  # reading is the operator's choice
        '[sandbox]\nhost_dir = "/srv/shared-code"\nhost_dir_mode = "rw"\n',
    ],
)
def test_a_narrower_or_read_only_host_dir_is_accepted(tmp_path: Path, sandbox: str) -> None:
    _write(tmp_path, sandbox)
    assert load_settings(tmp_path, environ={}).sandbox.host_dir is not None


def _cors(persyn: Persyn, origins: str) -> None:
    persyn.env.update({"PERSYN_WEB__ENABLED": "true", "PERSYN_WEB__CORS_ORIGINS": origins})


@pytest.mark.e2e
def test_doctor_fails_any_origin_together_with_an_operator_key(persyn: Persyn) -> None:
    _cors(persyn, '["*"]')
    assert persyn.run("web", "keys", "create", "--name", "client").returncode == 0
    quiet = persyn.run("doctor")
    assert "cors_origins" not in quiet.stdout, quiet.stdout  # no operator key: nothing to flag
    assert persyn.run("web", "keys", "create", "--name", "ops", "--operator").returncode == 0
    done = persyn.run("doctor")
    assert done.returncode == 1
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("[FAIL] web channel")]
    assert "cors_origins allows '*'" in line and "1 operator key(s)" in line, done.stdout
    assert "fix: list only the origins that need the API" in done.stdout


@pytest.mark.e2e
def test_doctor_accepts_named_origins_with_an_operator_key(persyn: Persyn) -> None:
    _cors(persyn, '["https://chat.example.org"]')
    assert persyn.run("web", "keys", "create", "--name", "ops", "--operator").returncode == 0
    done = persyn.run("doctor")
    assert "[FAIL] web channel" not in done.stdout and "[ ok ] web channel" in done.stdout, done.stdout
