"""A pids cgroup per sandboxed command: the process-count limit that holds whoever runs Persyn.

`prlimit --nproc` inside the sandbox limits the processes of uid 65534 in its user namespace,
but the kernel exempts the host's root: bubblewrap started by root maps the sandbox's user to
kuid 0, and kuid 0 is never held to RLIMIT_NPROC (measured here: 105 processes started under
`--nproc=32`). A pids cgroup counts every process and thread put in it, whoever owns them.

Where one is writable — cgroup v1's `pids` hierarchy, or a cgroup v2 directory whose
`cgroup.subtree_control` can enable `pids` (root, or a delegated subtree) — each command gets
a child cgroup with `pids.max` set; bubblewrap is started by a two-word host shell that moves
itself into it (`echo $$ > cgroup.procs`) and then `exec`s bubblewrap, so every process of the
sandbox is inside from its first instruction. Where none is writable, `find` returns None and
only `prlimit --nproc` stands (it holds for a non-root host user); `persyn sandbox check`
reports which.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["PidsCgroup"]

log = logging.getLogger(__name__)

_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


class PidsCgroup:
    """A directory under which per-command pids cgroups can be made."""

    def __init__(self, base: Path) -> None:
        self.base = base

    @classmethod
    def find(cls, own_cgroups: str | None = None) -> PidsCgroup | None:
        """A writable pids cgroup for this process's commands, or None (tried once: making it
        and setting a limit in it)."""
        try:
            text = own_cgroups if own_cgroups is not None else Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
        for candidate in _candidates(text):
            try:
                base = candidate / f"persyn-sandbox-{os.getpid()}"
                base.mkdir(exist_ok=True)
                if (base / "cgroup.subtree_control").exists():  # v2: the children need the controller
                    (base / "cgroup.subtree_control").write_text("+pids")
                probe = base / "probe"
                probe.mkdir(exist_ok=True)
                (probe / "pids.max").write_text("8")
                probe.rmdir()
            except OSError as exc:
                log.debug("no pids cgroup under %s: %s", candidate, exc)
                continue
            found = cls(base)
            atexit.register(found.close)  # empty by then: each command's cgroup went with it
            return found
        return None

    @contextlib.asynccontextmanager
    async def command(self, max_processes: int) -> AsyncIterator[list[str]]:
        """A fresh child cgroup holding at most `max_processes`, as the argv prefix that runs a
        command inside it; removed (its stragglers killed) when the command is done."""
        child = self.base / f"cmd-{next(_counter)}"
        child.mkdir()
        try:
            (child / "pids.max").write_text(str(max_processes))
            procs = str(child / "cgroup.procs")
            yield ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs]
        finally:
            await _remove(child)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.base.rmdir()


def _candidates(own: str) -> list[Path]:
    """Where this process's pids cgroup is: v1's pids hierarchy, else the v2 unified one."""
    found: list[Path] = []
    for line in own.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if "pids" in controllers.split(","):
            found.append(_ROOT / "pids" / relative)
        elif number == "0" and not controllers:
            unified = _ROOT / "unified" if (_ROOT / "unified" / "cgroup.controllers").exists() else _ROOT
            with contextlib.suppress(OSError):
                if "pids" in (unified / "cgroup.controllers").read_text().split():
                    found.append(unified / relative)
    return found


async def _remove(child: Path) -> None:
    """Remove a command's cgroup: empty once its processes are gone (the sandbox's PID 1 took
    them with it, which the kernel finishes a moment after bwrap exits: so the first waits are
    a millisecond, doubling); any left after a while are killed."""
    delay = 0.001
    for attempt in range(40):
        try:
            os.rmdir(child)  # a cgroupfs directory: no disk behind it, never blocks
            return
        except FileNotFoundError:
            return
        except OSError:
            if attempt % 10 == 9:
                with contextlib.suppress(OSError, ValueError):
                    for pid in _read(child / "cgroup.procs").split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
    log.warning("could not remove the sandbox's pids cgroup %s", child)


def _read(path: Path) -> str:
    with open(path) as file:
        return file.read()
