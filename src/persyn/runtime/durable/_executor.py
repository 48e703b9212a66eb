"""Every worker process's own DBOS executor id (ARCHITECTURE §3).

DBOS tags each workflow with the executor id of the process running it, and on launch
re-runs every workflow still PENDING under *its own* id: that is how a process restarted
after a crash resumes its work. With DBOS's default id ("local") for every process, a second
process — `persyn chat`, a second `persyn run` — started while `persyn run` is mid-turn took
over the running turn at its launch and ran its unfinished step again (the respond call twice:
two provider bills).

So each process holds a *slot*: a role (`run`, `chat`, `worker`) and the lowest number whose
lock file `executors/<role>-<n>@<host>.lock` in the deployment's data directory it can lock
(`flock`, held for the life of the process and released by the kernel when it dies, however
it dies). Its executor id is `<role>-<n>@<host>`:

- a second concurrent `persyn run` finds slot 0 locked and becomes `run-1@host`: it never
  recovers the first one's work;
- a `persyn run` restarted after `kill -9` finds slot 0 free again, gets its old id back, and
  DBOS recovers its own unfinished turns at launch;
- a slot of this host whose lock file no live process holds is a dead executor's: a process
  starting here adopts its PENDING work (`adopt_dead_executors`), so a worker that died and
  never came back under its number does not strand it.

The host name keeps two hosts sharing one system database (PostgreSQL) apart; processes on
different hosts never adopt each other's slots (a lock says nothing about another host). A
deployment that names its executors itself (`[dispatch] executor_id`, e.g. containers whose
host name changes on every start) bypasses the slots; its id must then be unique per process.

Adoption calls `DBOS._recover_pending_workflows` (what DBOS's admin endpoint
`/dbos-workflow-recovery` does): DBOS 3.4 has no public call for it. Should it vanish, dead
slots are not adopted — their work then waits for a process to take that slot again: slower,
never wrong. Recovery re-enqueues only rows still PENDING under the dead id, so adopting
twice, or racing the restarted owner, runs nothing twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ExecutorSlot",
    "adopt_dead_executors",
    "claim_executor_slot",
    "executor_directory",
    "host_name",
    "live_executors",
]

log = logging.getLogger(__name__)

_MAX_SLOTS = 1000  # a bound, not a limit anyone should meet
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class ExecutorSlot:
    """A held slot: the executor id and the locked file that reserves it."""

    executor_id: str
    path: Path
    _fd: int | None

    def release(self) -> None:
        """Unlock the slot (the kernel does it too when the process ends)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def executor_directory(data_dir: Path) -> Path:
    """Where a deployment's slot lock files live."""
    return data_dir / "executors"


def host_name() -> str:
    return _UNSAFE.sub("-", socket.gethostname()).strip("-") or "host"


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live process (BlockingIOError), or locks unsupported
        os.close(fd)
        return None
    return fd


def claim_executor_slot(directory: Path, role: str, host: str | None = None) -> ExecutorSlot:
    """The lowest free slot of `role` on this host, locked until released or the process ends."""
    host = host or host_name()
    role = _UNSAFE.sub("-", role)
    directory.mkdir(parents=True, exist_ok=True)
    for number in range(_MAX_SLOTS):
        executor_id = f"{role}-{number}@{host}"
        path = directory / f"{executor_id}.lock"
        fd = _try_lock(path)
        if fd is not None:
            os.ftruncate(fd, 0)
            os.write(fd, f"{executor_id} pid {os.getpid()}\n".encode())
            return ExecutorSlot(executor_id, path, fd)
    raise RuntimeError(f"no free executor slot of role {role!r} in {directory}")


def adopt_dead_executors(
    directory: Path, own: str, recover: Callable[[list[str]], object], host: str | None = None
) -> list[str]:
    """Recover the PENDING work of this host's dead executors: every slot whose lock file no
    live process holds. Each is held while its work is re-enqueued, so its owner restarting
    meanwhile takes another slot rather than race it. Returns the ids adopted from."""
    host = host or host_name()
    adopted: list[str] = []
    if not directory.is_dir():
        return adopted
    for path in sorted(directory.glob(f"*@{host}.lock")):
        executor_id = path.name.removesuffix(".lock")
        if executor_id == own:
            continue
        fd = _try_lock(path)
        if fd is None:
            continue  # alive
        try:
            recover([executor_id])
            adopted.append(executor_id)
        except Exception as exc:  # adoption is a courtesy; the slot's owner recovers it anyway
            log.warning("could not recover the work of dead executor %s: %s", executor_id, exc)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    return adopted


def live_executors(directory: Path) -> list[str]:
    """The executor ids whose slot a live process holds (any host's file in `directory`):
    how a process that only submits tells whether any worker could answer it. A free lock is
    taken and released at once; a worker starting meanwhile takes the next slot number."""
    if not directory.is_dir():
        return []
    live: list[str] = []
    for path in sorted(directory.glob("*.lock")):
        fd = _try_lock(path)
        if fd is None:
            live.append(path.name.removesuffix(".lock"))
        else:
            os.close(fd)
    return live
