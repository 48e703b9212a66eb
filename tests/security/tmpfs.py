"""A real small filesystem for the tests of a full or read-only disk: a tmpfs mounted for one
test (root with permission to mount, as CI is; elsewhere those tests skip and say why)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["can_mount", "fill", "mounted", "small_disk_at"]


def _mount(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)


def _unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=False)


def can_mount(tmp: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = tmp / "mount-probe"
    try:
        _mount(probe, "64k")
    except (subprocess.CalledProcessError, OSError):
        return False
    _unmount(probe)
    return True


@contextmanager
def mounted(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount's `size=`) at `where` while the block runs."""
    _mount(where, size)
    try:
        yield where
    finally:
        _unmount(where)


@contextmanager
def small_disk_at(tmp: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` under `tmp`, or the test skips where nothing can be mounted."""
    if not can_mount(tmp):
        pytest.skip("needs root and permission to mount a tmpfs (a real full or read-only disk)")
    with mounted(tmp / "disk", size) as where:
        yield where


def fill(disk: Path) -> Path:
    """Write until the disk refuses more (it may be full already); the filler file, to free
    the disk with."""
    filler = disk / "filler"
    try:
        with open(filler, "ab") as file:
            while True:
                file.write(b"\0" * 65536)
                file.flush()
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    return filler
