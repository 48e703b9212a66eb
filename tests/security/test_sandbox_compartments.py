"""The `run_code` workspace belongs to a compartment (issue 33, items 1 and 2).

On 4c92b50 one folder per agent was bound at /workspace for everyone: Alice (her DM) had the
sandbox write `alice pin 9931`, and Mallory (another channel) got it back with
`cat /workspace/*`; a heartbeat run saw it too. Now each run works in the workspace its
provenance allows (`tools/sandbox/workspace.py`), and the operator still lists and resets every
one of them with `persyn sandbox`. The workspace is a tmpfs the sandbox sizes
(`[sandbox] workspace_mb`): writing past it fails inside with ENOSPC and the host keeps at most
the quota (plus tar's headers); a task that would take the data volume's `[sandbox] reserve_mb`
is refused before anything runs.

Real runtime, real bubblewrap, real CLI; the models are scripted doubles that delegate the
user's words as a shell command and report what it printed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.testing import ADA, consolidation_reply, registered_double, run_runtime
from persyn.testing.models import DoubleReply, last_user_text
from persyn.testing.requests import last_input, tool_returns
from persyn.tools.sandbox._disk import archive_cap

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from persyn_cli import Persyn

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PIN = "echo 'alice pin 9931' > /workspace/pin.txt && echo written"
PEEK = "cat /workspace/*"
BEAT = "My self-assessment"


class Shell:
    """The respond model hands what it is told to `run_code` (a beat: `cat /workspace/*`) and
    says the report; the sandbox model runs the task as one command and reports its output."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []  # (what was asked, what came back)
        self.sandbox_calls = 0

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        results = tool_returns(messages)
        if task == "reflect":
            return SelfAssessment(
                patterns="I keep files",
                serves_objectives=True,
                intention="pursue_goal",
                plan="look at my files",
            )
        if task == "sandbox":
            self.sandbox_calls += 1
            if not results:
                return DoubleReply(
                    tool_calls=[{"name": "run_command", "args": {"command": last_user_text(messages)}}]
                )
            ran = json.loads(str(results[0].content))
            return DoubleReply(text=f"out={ran['stdout']!r} err={ran['stderr']!r}")
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        said = last_input(messages)
        asked = PEEK if said.startswith(BEAT) else said
        if not results:
            return DoubleReply(tool_calls=[{"name": "run_code", "args": {"task": asked}}])
        content = str(results[0].content)
        try:
            report = str(json.loads(content)["report"])
        except (ValueError, KeyError, TypeError):
            report = content  # the tool failed: its message
        self.reports.append((asked, report))
        return DoubleReply(text=f"Report: {report}")


@pytest.fixture
def shell() -> Iterator[Shell]:
    instance = Shell()
    with registered_double("sandbox-shell", instance):
        yield instance


def _config(sandbox: str = "") -> str:
    return "[deliberation]\nenabled = false\n[sandbox]\n" + sandbox


def _stored_bytes(root: Path) -> int:
    return sum(os.lstat(Path(d) / f).st_size for d, _, files in os.walk(root) for f in files)


async def test_mallory_on_another_channel_cannot_read_what_alice_had_the_sandbox_write(
    tmp_path: Path, shell: Shell
) -> None:
    async with run_runtime(tmp_path / "home", model="test:sandbox-shell", config=_config()) as pilot:
        await pilot.say(PIN, channel="dm-alice", speaker="alice", transmitted=True)
        assert shell.reports[-1] == (PIN, "out='written\\n' err=''")

        await pilot.say(PEEK, channel="dm-mallory", speaker="mallory", transmitted=True)
        asked, seen = shell.reports[-1]
        assert asked == PEEK and "9931" not in seen and "No such file" in seen

        # Alice's own next run finds her file: the workspace persists, and it is hers.
        await pilot.say(PEEK, channel="dm-alice", speaker="alice", transmitted=True)
        assert shell.reports[-1] == (PEEK, "out='alice pin 9931\\n' err=''")

        # Mallory in Alice's channel is not Alice alone: not her workspace either.
        await pilot.say(PEEK, channel="dm-alice", speaker="mallory", transmitted=True)
        assert "9931" not in shell.reports[-1][1]


async def test_a_heartbeat_run_does_not_get_a_persons_workspace(tmp_path: Path, shell: Shell) -> None:
    async with run_runtime(tmp_path / "home", model="test:sandbox-shell", config=_config()) as pilot:
        await pilot.say(PIN, channel="dm-alice", speaker="alice", transmitted=True)
        before = len(shell.reports)
        assert await pilot.fire(timedelta(hours=1)) == 1
        await pilot.settle()
        beat = shell.reports[before:]
        assert beat and beat[0][0] == PEEK  # the beat delegated `cat /workspace/*`...
        assert "9931" not in beat[0][1] and "No such file" in beat[0][1]  # ...and saw nothing of Alice's


async def test_the_operator_lists_and_resets_every_compartments_workspace(
    tmp_path: Path, shell: Shell
) -> None:
    home = tmp_path / "home"
    async with run_runtime(home, model="test:sandbox-shell", config=_config()) as pilot:
        await pilot.say(PIN, channel="dm-alice", speaker="alice", transmitted=True)
        await pilot.say("echo mallory > /workspace/m.txt", channel="dm-mallory", speaker="mallory")
        people = {
            p.id
            for p in await pilot.full_store.list_persons(ADA.id)
            if p.display_name in ("Alice", "Mallory")
        }
    cli = Persyn(home=home, env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    listed = cli.run("sandbox", "list", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    workspaces = json.loads(listed.stdout)
    assert len(workspaces) == 2
    assert {w["agent_id"] for w in workspaces} == {ADA.id}
    seen = {
        (tuple(w["compartment"]["channels"]), tuple(w["compartment"]["participant_ids"])) for w in workspaces
    }
    assert {channels for channels, _ in seen} == {("test:dm-alice",), ("test:dm-mallory",)}
    assert {person for _, ids in seen for person in ids} == people
    assert all(w["files"] >= 1 and not w["compartment"]["own"] for w in workspaces)

    alice = next(w for w in workspaces if w["compartment"]["channels"] == ["test:dm-alice"])
    shown = cli.run("sandbox", "show", alice["key"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == [{"path": "pin.txt", "size_bytes": len("alice pin 9931\n")}]
    assert cli.run("sandbox", "show", "../etc").returncode == 2
    one = cli.run("sandbox", "reset", "--all", "--workspace", alice["key"])
    assert one.returncode == 2 and "not both" in one.stderr
    reset = cli.run("sandbox", "reset", "--all")
    assert reset.returncode == 0, reset.stderr
    assert "removed 2 sandbox workspaces of 1 agent(s)" in reset.stdout
    empty = cli.run("sandbox", "list", "--all", "--json")
    assert json.loads(empty.stdout) == []


async def test_writing_past_the_quota_fails_inside_and_the_host_keeps_at_most_the_quota(
    tmp_path: Path, shell: Shell
) -> None:
    flood = "i=0; while [ $i -lt 20 ]; do head -c 1000000 /dev/zero > /workspace/f$i || break; i=$((i+1)); done; echo $i"
    async with run_runtime(
        tmp_path / "home", model="test:sandbox-shell", config=_config("workspace_mb = 8\n")
    ) as pilot:
        root = pilot.settings.data_dir / "sandbox"
        await pilot.say(flood, channel="dm-mallory", speaker="mallory", transmitted=True)
        _, seen = shell.reports[-1]
        assert "No space left on device" in seen
        assert int(seen.split("out='")[1].split("\\n")[0]) < 9  # stopped at 8 MiB, not 20 MB
        assert _stored_bytes(root) <= archive_cap(8 * 1024 * 1024)
        # /tmp is bounded the same way.
        await pilot.say(
            "head -c 20000000 /dev/zero > /tmp/x; ls -l /tmp/x", channel="dm-mallory", speaker="mallory"
        )
        assert "No space left on device" in shell.reports[-1][1]
        assert _stored_bytes(root) <= archive_cap(8 * 1024 * 1024)


async def test_a_task_that_would_take_the_data_volumes_reserve_is_refused(
    tmp_path: Path, shell: Shell
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    free_mb = shutil.disk_usage(home).free // (1024 * 1024)
    config = _config(f"reserve_mb = {free_mb + 1024}\n")  # more than is free: every task is refused
    async with run_runtime(home, model="test:sandbox-shell", config=config) as pilot:
        await pilot.say(PIN, channel="dm-alice", speaker="alice", transmitted=True)
        _, said = shell.reports[-1]
        assert "reserve_mb" in said and "nothing was run" in said
        assert shell.sandbox_calls == 0  # refused before any model call
        assert _stored_bytes(pilot.settings.data_dir / "sandbox") == 0
