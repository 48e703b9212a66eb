"""A full disk (issue 33, item 2): a turn that fails on it ends with an error once there is
room again instead of staying PENDING and holding the agent's queue, is never replayed into the
same failure after a restart, is logged in one line, and shows a client no path or SQL."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbos import DBOS
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.runtime._storage_full import STORAGE_FULL_REASON
from persyn.testing.harness import WAIT_SECONDS, run_runtime
from persyn.testing.models import DoubleResult, echo_text, last_user_text, registered_double


def _mount(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)


def _unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=False)


def _can_mount(tmp: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = tmp / "mount-probe"
    try:
        _mount(probe, "64k")
    except (subprocess.CalledProcessError, OSError):
        return False
    _unmount(probe)
    return True


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MB filesystem (tmpfs), mounted for the test: the deployment's data lives there."""
    if not _can_mount(tmp_path):
        pytest.skip("needs root and permission to mount a tmpfs (a real full disk)")
    where = tmp_path / "disk"
    _mount(where, "16m")
    try:
        yield where
    finally:
        _unmount(where)


def fill(disk: Path) -> Path:
    """Write until the disk refuses more; the filler file, to free the disk with."""
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


async def test_a_turn_that_fills_the_disk_ends_and_is_not_replayed(small_disk: Path) -> None:
    """The attacker's own turn fills the disk (as `run_code` writing /workspace did): its
    waiter hears at once that it went unanswered; once there is room again the failure is
    recorded and the workflow has ended (not PENDING), the agent answers the next message, and
    a restart does not run the turn again."""
    home = small_disk / "home"
    fills: list[str] = []

    def attacker(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        said = last_user_text(messages)
        if task == "respond" and "fill the disk" in said:
            fills.append(said)
            fill(small_disk)
        return echo_text(messages)

    with registered_double("diskfiller", attacker):
        async with run_runtime(home, model="test:diskfiller") as pilot:
            await pilot.say("hello", transmitted=True)
            attack = pilot.event("please fill the disk")
            await pilot.runtime.submit(attack)
            told = await pilot.runtime.wait_marker(attack.agent_id, attack.id, timeout=WAIT_SECONDS)
            assert fills and not told.transmitted and told.reason == STORAGE_FULL_REASON, told
            (small_disk / "filler").unlink()  # the operator makes room (`persyn sandbox reset`)
            after = await pilot.say("are you still there?", transmitted=True)
            assert after.marker.text == "You said: are you still there?"
            status = await DBOS.get_workflow_status_async(attack.id)
            assert status is not None and status.status == "SUCCESS", status
            stored = await pilot.store.get_marker(attack.agent_id, attack.id, pilot.clock.now())
            assert stored is not None and stored.reason == STORAGE_FULL_REASON, stored
            trace = await pilot.store.deliberation_traces(attack.agent_id, [attack.id])
            assert "database or disk is full" in trace[0].trace["failed"], trace
        async with run_runtime(home, model="test:diskfiller") as pilot:  # stopped, then started
            await pilot.say("and now?", transmitted=True)
            await pilot.settle()
    assert fills == ["please fill the disk"]
