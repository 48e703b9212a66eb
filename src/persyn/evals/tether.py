"""Keeps the eval's scratch daemon from outliving the eval (issue 38).

`python -m persyn.evals.tether COMMAND...` starts COMMAND (the scratch `persyn run`) as its
child and holds its own stdin, a pipe whose other end only the eval holds. When that pipe
reaches its end — the eval closed it, or died, even by SIGKILL, which no handler sees — the
tether stops the child with SIGTERM (SIGKILL if it has not ended within a minute). SIGTERM
and SIGINT sent to the tether are passed on to the child, so the eval stops the daemon as
before, through it. The tether exits with the child's code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from types import FrameType

__all__ = ["main"]

_GRACE_SECONDS = 60.0


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()


def _watch_the_eval(child: subprocess.Popen[bytes]) -> None:
    """Read stdin to its end (nothing is ever written to it), then stop the child. Read from
    the descriptor, not `sys.stdin.buffer`: this daemon thread is still blocked in the read
    when the tether exits, and a buffered reader's lock held at interpreter shutdown aborts
    the process ("Fatal Python error: _enter_buffered_busy") instead of exiting with the
    child's code."""
    descriptor = sys.stdin.fileno()
    while os.read(descriptor, 4096):
        pass
    _stop(child)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m persyn.evals.tether COMMAND...", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    threading.Thread(target=_watch_the_eval, args=(child,), daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
