"""The data volume's reserve (`tools/sandbox/_disk.py`): measured on the real volume, with
claims so large (a GiB) that what other processes write meanwhile cannot change the outcome."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from persyn.core.errors import ToolError
from persyn.tools.sandbox._disk import DiskReserve

GIB = 1024**3


def test_commands_in_flight_count_against_the_reserve(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    if free < 4 * GIB:
        pytest.skip("needs 4 GiB free to measure")
    # A folder not made yet is measured at its nearest existing parent.
    reserve = DiskReserve(tmp_path / "sandbox" / "not-yet", free - 5 * GIB // 4)
    with reserve.claim(GIB // 2):  # leaves 3/4 GiB above the reserve
        with pytest.raises(ToolError, match=r"reserve_mb .* nothing was run"), reserve.claim(GIB):
            pass  # this one would not
        with reserve.claim(GIB // 4):
            pass
    with reserve.claim(GIB):  # released: room again
        pass
