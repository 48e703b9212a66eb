"""The eval's tether (`persyn.evals.tether`) exits with its child's code while the eval still
holds the pipe open: the thread that watches the pipe must not abort the interpreter at exit
("Fatal Python error: _enter_buffered_busy", what every scratch daemon's stop printed)."""

from __future__ import annotations

import subprocess
import sys


def test_the_tether_exits_with_its_childs_code_while_its_pipe_is_open() -> None:
    tether = subprocess.Popen(
        [sys.executable, "-m", "persyn.evals.tether", sys.executable, "-c", "raise SystemExit(3)"],
        stdin=subprocess.PIPE,  # held open by this test, as the eval holds it
        stderr=subprocess.PIPE,
    )
    assert tether.stdin is not None and tether.stderr is not None
    try:
        err = tether.stderr.read()  # to its end: the tether (and its child) exited
        code = tether.wait(timeout=120)
    finally:
        tether.stdin.close()
        tether.stderr.close()
    assert b"Fatal Python error" not in err, err.decode(errors="replace")
    assert code == 3
