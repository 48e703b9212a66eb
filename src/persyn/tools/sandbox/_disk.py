"""How a bubblewrap workspace is bounded in size and kept between commands, and the free
space sandbox runs never take from the store (issue 33 item 2).

**The quota is the sandbox's own.** Inside, `/workspace` (and `/tmp`) is a tmpfs that
bubblewrap mounts with `--size`: a write past `[sandbox] workspace_mb` fails there with
ENOSPC, as on a full disk, whatever the code does. Nothing the sandboxed code writes reaches
the host's disk directly: no host folder is bound writable.

**Persistence is an archive, moved by the sandbox.** Between commands a workspace is one tar
archive on the host (`<workspace>/workspace.tar`). A command starts by extracting it *inside*,
read from a pipe the host feeds, and ends by archiving the tmpfs *inside*, writing to a pipe the
host drains into a temporary file beside the archive. Pipes, never a descriptor of the host file:
a file's descriptor can be reopened for writing through `/proc` by a sandbox whose uid maps to
the file's owner (root runs bubblewrap as the host's uid 0), which would write past the quota. The host never
extracts or follows anything the sandbox made; it counts bytes. What it keeps is bounded three
ways: the tmpfs cannot hold more than the quota; the host stops keeping bytes past
`archive_cap` (the quota plus room for tar's headers) and then keeps nothing; and the archive
must end with a marker written after tar succeeded, so a command stopped at the wall clock (or
killed before it saved) leaves the workspace exactly as it was before it — each command's
changes are kept whole or not at all. The new archive replaces the old one by rename.

Cost: each command copies the workspace in and out (tmpfs to pipe to page cache; a few ms for
small workspaces, a fraction of a second near 256 MiB), and a running command holds up to twice
the quota in memory (its tmpfs `/workspace` and `/tmp`).

**The reserve.** `DiskReserve` refuses to start a command when the data volume's free space,
less what commands in flight may still write (each claims its archive cap), would fall below
`[sandbox] reserve_mb`: the store's database, logs and DBOS state keep that room whatever the
sandbox does; and a finished command's archive is dropped rather than kept when the volume went
under the reserve while it ran. The claim is counted in this process; a second process on the same volume checks
the real free space, which the first's writes already reduce.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from persyn.core.errors import ToolError

__all__ = ["SAVED_MARK", "ArchiveTransfer", "DiskReserve", "archive_cap"]

SAVED_MARK = b"#persyn-workspace-saved\n"  # written inside after tar succeeded
_MIB = 1024 * 1024
_CHUNK = 1 << 20
_DRAIN_AFTER_EXIT = 30.0  # seconds to wait for the pipe after the sandbox ended


def archive_cap(workspace_bytes: int) -> int:
    """The largest archive kept for a workspace of `workspace_bytes`: the quota plus 1/16 and
    1 MiB for tar's headers (512 bytes a file, which a tmpfs does not count)."""
    return workspace_bytes + workspace_bytes // 16 + _MIB


class DiskReserve:
    """Free space on the data volume (`volume`: a folder on it) that sandbox runs never take."""

    def __init__(self, volume: Path, reserve_bytes: int) -> None:
        self.volume = volume
        self.reserve_bytes = reserve_bytes
        self._claimed = 0

    def free_bytes(self) -> int:
        place = self.volume
        while not place.exists() and place != place.parent:
            place = place.parent
        return shutil.disk_usage(place).free

    @contextlib.contextmanager
    def claim(self, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` of the volume for one command; `ToolError` (nothing runs) when that
        would leave less than the reserve free."""
        self.check(nbytes)
        self._claimed += nbytes  # no await between the check and this: one event loop
        try:
            yield
        finally:
            self._claimed -= nbytes

    def check(self, nbytes: int) -> None:
        free = self.free_bytes() - self._claimed
        if free - nbytes < self.reserve_bytes:
            raise ToolError(
                f"the data volume has {max(free, 0) // _MIB} MiB free; a sandbox command needs "
                f"{(self.reserve_bytes + nbytes) // _MIB} MiB ([sandbox] reserve_mb "
                f"{self.reserve_bytes // _MIB} kept for the store, plus the workspace): nothing was run"
            )


class ArchiveTransfer:
    """One command's workspace archive: the descriptor it is restored from, the pipe it is
    saved through, and the temporary file that becomes the archive when complete."""

    def __init__(self, folder: Path, archive_name: str, cap: int, reserve: DiskReserve) -> None:
        self.archive = folder / archive_name
        self.cap = cap
        self.reserve = reserve
        self._partial = folder / f".incoming-{secrets.token_hex(6)}"
        self.source: int | None = None  # the sandbox's end of the restore pipe
        self._feed: int | None = None  # ours
        self._stored: int | None = None
        if self.archive.is_file() and not self.archive.is_symlink():
            self._stored = os.open(self.archive, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            self.source, self._feed = os.pipe()
        self._read, self.sink = os.pipe()
        self._over = False
        self._failed: str | None = None
        self._drain: asyncio.Future[None] | None = None
        self._sending: asyncio.Future[None] | None = None

    @property
    def fds(self) -> tuple[int, ...]:
        """What the sandbox is handed."""
        return (self.sink,) if self.source is None else (self.source, self.sink)

    def started(self) -> None:
        """The sandbox has its copies: close ours, feed the archive and drain the pipe off the
        event loop."""
        if self.source is not None:
            os.close(self.source)
            self.source = None
        os.close(self.sink)
        self._drain = asyncio.ensure_future(asyncio.to_thread(self._receive))
        if self._feed is not None:
            self._sending = asyncio.ensure_future(asyncio.to_thread(self._send))

    def _send(self) -> None:
        assert self._stored is not None and self._feed is not None
        stored, feed = self._stored, self._feed
        self._stored = self._feed = None
        try:
            while chunk := os.read(stored, _CHUNK):
                os.write(feed, chunk)  # blocks until read; a sandbox that is gone: EPIPE
        except OSError:
            pass
        finally:
            os.close(stored)
            os.close(feed)

    def _receive(self) -> None:
        limit = self.cap + len(SAVED_MARK)
        received = 0
        with os.fdopen(self._read, "rb", buffering=0) as pipe:
            try:
                out = open(self._partial, "wb")  # noqa: SIM115 - closed below, after draining
            except OSError as exc:
                self._failed, out = f"cannot write {self._partial.name}: {exc.strerror}", None
            while chunk := pipe.read(_CHUNK):  # drained to the end: the writer is never stuck
                received += len(chunk)
                if out is None or self._over:
                    continue
                if received > limit:
                    self._over = True
                    continue
                try:
                    out.write(chunk)
                except OSError as exc:
                    self._failed = f"cannot write the archive: {exc.strerror}"
                    out.close()
                    out = None
            if out is not None:
                try:
                    out.flush()
                    os.fsync(out.fileno())
                except OSError as exc:
                    self._failed = f"cannot write the archive: {exc.strerror}"
                finally:
                    out.close()

    async def finish(self, keep: bool) -> str | None:
        """Wait for the pipe; when `keep`, make the new archive the workspace if it is whole.
        Returns why the command's changes were not kept (None: kept, or not asked to)."""
        try:
            if self._drain is None:
                return None
            try:
                async with asyncio.timeout(_DRAIN_AFTER_EXIT):
                    await asyncio.shield(self._drain)
                    if self._sending is not None:
                        await asyncio.shield(self._sending)
            except TimeoutError:
                return "the sandbox did not finish saving the workspace"
            if not keep:
                return None
            if self._failed is not None:
                return self._failed
            if self._over:
                return (
                    f"its archive passed {self.cap // _MIB} MiB ([sandbox] workspace_mb plus room "
                    "for tar's headers: too many small files?)"
                )
            return self._complete()
        finally:
            self.discard()

    def _complete(self) -> str | None:
        try:
            size = self._partial.stat().st_size
            with open(self._partial, "rb+") as out:
                out.seek(max(size - len(SAVED_MARK), 0))
                if size < len(SAVED_MARK) or out.read() != SAVED_MARK:
                    return "the command ended before the workspace was saved"
                out.truncate(size - len(SAVED_MARK))
            # Something else (another process) may have filled the volume meanwhile: the
            # store's reserve wins over this command's changes.
            free = self.reserve.free_bytes()
            if free < self.reserve.reserve_bytes:
                return (
                    f"the data volume has {free // _MIB} MiB free, under [sandbox] reserve_mb "
                    f"{self.reserve.reserve_bytes // _MIB}"
                )
            self._partial.replace(self.archive)
        except OSError as exc:
            return f"cannot keep the archive: {exc.strerror}"
        return None

    def discard(self) -> None:
        """Close what is still ours and remove the temporary file (idempotent)."""
        if self._drain is None:  # the sandbox never started: every descriptor is still ours
            for fd in (self.source, self._feed, self._stored, self._read, self.sink):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self.source = self._feed = self._stored = None
            self._drain = asyncio.get_running_loop().create_future()
            self._drain.set_result(None)
        self._partial.unlink(missing_ok=True)
