"""`persyn eval continuity` killed outright (SIGKILL: no handler, no cleanup) leaves no scratch
daemon behind (issue 38): each daemon runs under a tether that stops it when the eval's end of
a pipe closes, which the kernel does for a killed process too; so does the IRC server of its
group chat."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

WAIT_SECONDS = 240.0  # bounds a broken test only


def _running_on(work: Path) -> list[int]:
    """Our live processes of the week at `work`: `persyn ... run` whose environment names its
    home as PERSYN_HOME, and the group chat's server started on its files (read from /proc:
    what runs, whoever started it; a zombie shows neither)."""
    marker = f"PERSYN_HOME={work / 'home'}".encode()
    conf = str(work / "irc" / "ngircd.conf").encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours
        if (marker in environ and b"run" in argv) or conf in argv:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc")
def test_a_killed_eval_leaves_no_daemon_running(tmp_path: Path) -> None:
    work = tmp_path / "week"
    daemon_log = work / "daemon.log"
    evaluation = Persyn(tmp_path / "operator").popen("eval", "continuity", "--work", str(work))
    deadline = time.monotonic() + WAIT_SECONDS
    try:
        while "persyn is serving" not in (
            daemon_log.read_text(errors="replace") if daemon_log.exists() else ""
        ):
            assert evaluation.poll() is None, (tmp_path / "eval.log").read_text(errors="replace")
            assert time.monotonic() < deadline, "the eval's first daemon did not start"
            time.sleep(0.1)
        running = _running_on(work)
        assert len(running) >= 3, f"the daemon and the IRC server are not found running: {running}"
    finally:
        evaluation.send_signal(signal.SIGKILL)
        evaluation.wait()
    left = _running_on(work)
    while left and time.monotonic() < deadline + 120:
        time.sleep(0.2)
        left = _running_on(work)
    for pid in left:  # stop what this test started before failing
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes outlived the killed eval: {left}"
    # Stopped as on SIGTERM (the tether's signal), not killed: it said so after it started.
    text = daemon_log.read_text(errors="replace")
    assert "stopping..." in text.rsplit("persyn is serving", 1)[1], text
