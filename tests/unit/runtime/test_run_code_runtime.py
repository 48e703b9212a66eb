"""`run_code` through the real runtime and real bubblewrap (SPEC §4.6): the respond model
delegates; the sandbox agent (model task `sandbox`, a scripted double that reads its tool
results) writes a script in the workspace and runs it; the output reaches the caller. Each of
the sandbox agent's round-trips is a usage record of the originating conversation; a sandbox
model that never stops is stopped by the loop breakers or the task's token budget; with no
provider the tool is absent and the operator is told why."""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

import needs
from persyn.testing import ADA, Pilot, run_runtime, tool_returns
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.tools.sandbox.workspace import SandboxWorkspaces

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason=needs.reason("bubblewrap (bwrap)"))


class Coder:
    """The respond model delegates the user's request; the sandbox model plays `scenario`."""

    def __init__(self) -> None:
        self.scenario = "sum"
        self.offered: list[list[str]] = []
        self.delegated: list[dict[str, Any]] = []  # what run_code returned to the respond model
        self.sandbox_calls = 0

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        results = tool_returns(messages)
        if task == "respond":
            self.offered.append(sorted(t.name for t in info.function_tools))
            if "run_code" not in self.offered[-1]:
                return DoubleReply(text="I cannot run code here.")
            if not results:
                return DoubleReply(
                    tool_calls=[{"name": "run_code", "args": {"task": last_user_text(messages)}}]
                )
            output = json.loads(str(results[0].content))
            self.delegated.append(output)
            return DoubleReply(text=f"Done: {output['report']}")
        if task != "sandbox":
            return DoubleReply(text="ok")
        self.sandbox_calls += 1
        assert sorted(t.name for t in info.function_tools) == [
            "list_files",
            "read_file",
            "run_command",
            "write_file",
        ]
        if self.scenario == "sum":
            if not results:
                script = "import sys\nprint(sum(range(1, 101)), sys.argv[1])\n"
                return DoubleReply(
                    tool_calls=[{"name": "write_file", "args": {"path": "work/sum.py", "content": script}}]
                )
            if results[0].tool_name == "write_file":
                return DoubleReply(
                    tool_calls=[{"name": "run_command", "args": {"command": "python3 work/sum.py gauss"}}]
                )
            ran = json.loads(str(results[0].content))
            return DoubleReply(
                text=f"The script printed {ran['stdout'].strip()!r} (exit {ran['exit_code']})."
            )
        if self.scenario == "skill":  # run a skill's script, and try to change the skill
            if not results:
                command = "python3 /skills/greeter/scripts/greet.py Ada; echo x > /skills/greeter/SKILL.md"
                return DoubleReply(tool_calls=[{"name": "run_command", "args": {"command": command}}])
            ran = json.loads(str(results[0].content))
            return DoubleReply(text=f"{ran['stdout'].strip()} | {ran['stderr'].strip()}")
        if self.scenario == "same":  # the same command forever
            return DoubleReply(tool_calls=[{"name": "run_command", "args": {"command": "echo again"}}])
        # "endless": a new command every time, never a report
        return DoubleReply(
            tool_calls=[{"name": "run_command", "args": {"command": f"echo step {self.sandbox_calls}"}}]
        )


@pytest.fixture
def coder() -> Iterator[Coder]:
    instance = Coder()
    with registered_double("coder", instance):
        yield instance


def _runtime(tmp_path: Path, sandbox: str = "") -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home",
        model="test:coder",
        config="[deliberation]\nenabled = false\n[sandbox]\n" + sandbox,
    )


@needs_bwrap
async def test_a_delegated_task_writes_and_runs_a_script_and_the_result_reaches_the_caller(
    tmp_path: Path, coder: Coder
) -> None:
    async with _runtime(tmp_path) as pilot:
        event, marker = await pilot.say("Add the numbers from 1 to 100 with a script.")
        assert marker.transmitted
        assert marker.text == "Done: The script printed '5050 gauss' (exit 0)."
        assert "run_code" in coder.offered[0]
        (delegated,) = coder.delegated
        assert delegated["steps"] == [
            'write_file({"content":"import sys\\nprint(sum(range(1, 101)), sys.argv[1])\\n","path":"work/sum.py"}) → exit 0',
            'run_command({"command":"python3 work/sum.py gauss"}) → exit 0',
        ]
        assert delegated["model_calls"] == 3 and delegated["stopped"] is None
        # The conversation's workspace (one per compartment) keeps the script, in its archive.
        (workspace,) = SandboxWorkspaces(pilot.settings.data_dir / "sandbox").listing(ADA.id)
        assert workspace.compartment is not None and workspace.compartment["channels"] == ["test:room"]
        archive = pilot.settings.data_dir / "sandbox" / ADA.id / workspace.key / "workspace.tar"
        with tarfile.open(archive) as opened:
            assert "./work/sum.py" in opened.getnames()
        records = pilot.usage()
        sandbox = [r for r in records if r.stage == "sandbox"]
        respond = [r for r in records if r.stage == "respond"]
        assert len(sandbox) == 3 and respond
        # Metered like any call, and attributed to the conversation the tool call served.
        assert {(r.agent_id, r.conversation_id, r.thread_id) for r in sandbox} == {
            (ADA.id, respond[0].conversation_id, event.id)
        }
        assert respond[0].conversation_id is not None


@needs_bwrap
async def test_a_sandbox_model_that_repeats_itself_is_stopped(tmp_path: Path, coder: Coder) -> None:
    coder.scenario = "same"
    async with _runtime(tmp_path, "max_iterations = 6\n") as pilot:
        _, marker = await pilot.say("Say again and again.")
        assert marker.transmitted
        (delegated,) = coder.delegated
        assert delegated["stopped"] is not None and "repeated_call" in delegated["stopped"]
        ran = [s for s in delegated["steps"] if s.endswith("exit 0")]
        assert len(ran) == pilot.settings.tools.max_identical_calls
        assert coder.sandbox_calls <= 6 + 2


@needs_bwrap
async def test_a_sandbox_model_that_never_reports_stops_at_its_iteration_limit(
    tmp_path: Path, coder: Coder
) -> None:
    coder.scenario = "endless"
    async with _runtime(tmp_path, "max_iterations = 3\n") as pilot:
        _, marker = await pilot.say("Count forever.")
        assert marker.transmitted
        (delegated,) = coder.delegated
        assert delegated["stopped"] == "max_round_trips"
        assert coder.sandbox_calls == delegated["model_calls"] <= 3 + 2
        assert len([r for r in pilot.usage() if r.stage == "sandbox"]) == coder.sandbox_calls


@needs_bwrap
async def test_the_task_token_budget_is_checked_before_each_call(tmp_path: Path, coder: Coder) -> None:
    coder.scenario = "endless"
    async with _runtime(tmp_path, "max_iterations = 50\nmax_task_tokens = 1000\n") as pilot:
        await pilot.say("Count forever.")
        (delegated,) = coder.delegated
        assert delegated["stopped"] is not None and delegated["stopped"].startswith(
            "token budget of 1000 spent"
        )
        sandbox = [r for r in pilot.usage() if r.stage == "sandbox"]
        assert len(sandbox) == coder.sandbox_calls == delegated["model_calls"] - 1  # the last was refused
        spent = sum(r.input_tokens + r.output_tokens for r in sandbox)
        assert spent == delegated["tokens"] >= 1000
        assert spent - (sandbox[-1].input_tokens + sandbox[-1].output_tokens) < 1000


async def test_without_a_provider_run_code_is_absent_and_the_operator_is_told(
    tmp_path: Path, coder: Coder
) -> None:
    if shutil.which("runsc") is not None:
        pytest.skip("runsc is installed here")
    async with _runtime(tmp_path, 'provider = "runsc"\n') as pilot:
        await pilot.say("Add the numbers from 1 to 100 with a script.")
        assert coder.offered and "run_code" not in coder.offered[0]
        notice = pilot.runtime.tools.notice()
        assert (
            notice
            == "run_code is not offered: no sandbox provider (runsc: 'runsc' is not installed (gVisor is not packaged in Debian))"
        )
        assert not (pilot.settings.data_dir / "sandbox" / ADA.id).exists()


@needs_bwrap
async def test_a_skill_script_run_in_the_sandbox(tmp_path: Path, coder: Coder) -> None:
    skills = tmp_path / "skills"
    (skills / "greeter" / "scripts").mkdir(parents=True)
    (skills / "greeter" / "SKILL.md").write_text(
        "---\nname: greeter\ndescription: Greets people.\n---\nRun it.\n"
    )
    (skills / "greeter" / "scripts" / "greet.py").write_text("import sys\nprint('hello', sys.argv[1])\n")
    coder.scenario = "skill"
    config = (
        "[deliberation]\nenabled = false\n[sandbox]\n"
        f'[skills]\ndirectories = ["{skills}"]\nprotected = ["greeter"]\n'
    )
    async with run_runtime(tmp_path / "home", model="test:coder", config=config) as pilot:
        _, marker = await pilot.say("Greet Ada with the greeter skill.")
    assert (
        marker.text
        == "Done: hello Ada | /bin/sh: 1: cannot create /skills/greeter/SKILL.md: Read-only file system"
    )
    assert (skills / "greeter" / "SKILL.md").read_text().startswith("---\nname: greeter")
