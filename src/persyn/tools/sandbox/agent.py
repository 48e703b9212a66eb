"""`run_code` (SPEC §4.6): code by delegation. The agent never runs code itself; `run_code` hands
the task, in words, to a separate **sandbox agent** — its own model task `sandbox`, called
through the agent's gateway, so every round-trip is metered, attributed to the conversation
the tool call serves and admitted by the autonomy budget like any call — whose only tools are
file and command tools that execute inside the agent's sandbox (`tools/sandbox/isolation.py`). Its final
words are the report `run_code` returns.

Loop breakers, so a sandbox model that calls the same tool forever stops: at most
`[sandbox] max_iterations` round-trips (then one more to report), identical calls refused after
`[tools] max_identical_calls`, and the task's tokens checked against `[sandbox] max_task_tokens`
before every call — a task over it gets no more model calls and reports what it has.

Even reading and writing files runs inside the sandbox (as `cat`), never as a host file
operation on the workspace: code in the sandbox can leave symbolic links there, and a host
process following one would read or write outside it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config import SandboxConfig, ToolsConfig
from persyn.core.errors import ModelError, ToolError
from persyn.gateway.base import Completion, Prompt, ToolSpec, UserTurn
from persyn.tools.breaker import LoopBreaker
from persyn.tools.loop import run_tool_loop
from persyn.tools.registry import Tool, ToolRegistry
from persyn.tools.sandbox.isolation import (
    SANDBOX_HOST_DIR,
    SANDBOX_SKILLS,
    SANDBOX_WORKSPACE,
    CommandResult,
    SandboxProvider,
)

__all__ = [
    "SANDBOX_INSTRUCTION",
    "RunCodeInput",
    "RunCodeOutput",
    "delegate",
    "run_code_tool",
    "sandbox_agent_tools",
]

CompleteFn = Callable[[Prompt, Sequence[ToolSpec]], Awaitable[Completion]]

SANDBOX_INSTRUCTION = """You are a sandbox agent. Another agent delegated a programming task to you.
You work in an isolated Linux environment: your working directory is {workspace}, which keeps its files
between tasks (at most {quota} MiB; a command stopped at its time limit keeps no changes); nothing else
you write outlives a command. {host}{skills}Network: {network}.
Use your tools to write files and run commands (sh; python3 is available). Each command is limited
to {cpu} CPU seconds, {memory} MiB of memory and {wall:g} seconds of wall-clock time.
When the task is done (or cannot be done), stop calling tools and reply with a short report for the
agent that asked: what you did, the results (exact numbers and outputs), and any files you left."""

_NETWORKS = {
    "none": "none (no IP sockets at all)",
    "loopback": "a private loopback only (the host is not reachable)",
    "full": "the host's network",
}


# the sandbox agent's own tools -----------------------------------------------------------------
class WriteFileInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, max_length=500, description="Where, relative to the working directory.")
    content: str = Field(max_length=2_000_000, description="The whole content of the file.")


class ReadFileInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        min_length=1, max_length=500, description="The file, relative to the working directory."
    )


class ListFilesInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        default=".", max_length=500, description="The directory to list (default: the working one)."
    )


class RunCommandInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, max_length=20_000, description="A shell command line (sh -c).")


class CommandOutput(BaseModel):
    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    stdout: str
    stderr: str
    stopped: str | None = None  # why a limit ended it


def _as_output(result: CommandResult) -> CommandOutput:
    stopped = None
    if result.timed_out:
        stopped = "wall-clock limit"
    elif result.signal in ("SIGXCPU", "SIGKILL"):
        stopped = "CPU-time limit" if result.signal == "SIGXCPU" else "killed (a limit)"
    return CommandOutput(
        exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr, stopped=stopped
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def skill_mounts(skills: Mapping[str, Path]) -> dict[str, Path]:
    """Each skill's folder at `/skills/NAME` inside, read-only."""
    return {f"{SANDBOX_SKILLS}/{name}": folder for name, folder in skills.items()}


def sandbox_agent_tools(
    provider: SandboxProvider, workspace: Path, skills: Mapping[str, Path] | None = None
) -> list[Tool[Any, Any]]:
    """The file and command tools of the sandbox agent: every one runs inside the sandbox, with
    the agent's skills (name → folder) read-only at `/skills/NAME` (their scripts run there)."""
    mounts = skill_mounts(skills or {})

    async def inside(command: str, stdin: bytes | None = None) -> CommandOutput:
        return _as_output(await provider.run(workspace, command, stdin=stdin, read_only=mounts))

    async def write_file(arguments: WriteFileInput) -> CommandOutput:
        path = _quote(arguments.path)
        return await inside(f'mkdir -p -- "$(dirname -- {path})" && cat > {path}', arguments.content.encode())

    async def read_file(arguments: ReadFileInput) -> CommandOutput:
        return await inside(f"head -c 60000 -- {_quote(arguments.path)}")

    async def list_files(arguments: ListFilesInput) -> CommandOutput:
        return await inside(f"ls -la -- {_quote(arguments.path)}")

    async def run_command(arguments: RunCommandInput) -> CommandOutput:
        return await inside(arguments.command)

    return [
        Tool(
            "write_file",
            "Create or replace a file in the sandbox.",
            WriteFileInput,
            CommandOutput,
            write_file,
        ),
        Tool(
            "read_file",
            "Read a file in the sandbox (first 60,000 bytes).",
            ReadFileInput,
            CommandOutput,
            read_file,
        ),
        Tool("list_files", "List a directory in the sandbox.", ListFilesInput, CommandOutput, list_files),
        Tool(
            "run_command",
            "Run a shell command in the sandbox's working directory; returns exit code, stdout and stderr.",
            RunCommandInput,
            CommandOutput,
            run_command,
        ),
    ]


# the delegation ----------------------------------------------------------------------------------
class RunCodeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(
        min_length=1,
        max_length=8000,
        description="What to do, in words: the sandbox agent writes and runs the code and reports back.",
    )


class RunCodeOutput(BaseModel):
    model_config = ConfigDict(frozen=True)

    report: str  # the sandbox agent's final words
    steps: list[str] = Field(default_factory=list[str])  # each tool call, with how it ended
    model_calls: int = 0
    tokens: int = 0
    stopped: str | None = None  # a breaker or the token budget ended the task early


def instruction(config: SandboxConfig, skills: Sequence[str] = ()) -> str:
    host = ""
    if config.host_dir is not None:
        access = "read and write" if config.host_dir_mode == "rw" else "read (not change)"
        host = f"A shared directory is at {SANDBOX_HOST_DIR}: you may {access} it. "
    shown = ""
    if skills:
        shown = (
            f"The agent's skills are at {SANDBOX_SKILLS}/NAME, read-only (SKILL.md, scripts/ to run from "
            f"there): {', '.join(sorted(skills))}. "
        )
    return SANDBOX_INSTRUCTION.format(
        workspace=SANDBOX_WORKSPACE,
        host=host,
        skills=shown,
        network=_NETWORKS[config.network],
        quota=config.workspace_mb,
        cpu=config.cpu_seconds,
        memory=config.memory_mb,
        wall=config.wall_seconds,
    )


async def delegate(
    task: str,
    provider: SandboxProvider,
    workspace: Path,
    complete: CompleteFn,
    config: SandboxConfig,
    tools: ToolsConfig,
    skills: Mapping[str, Path] | None = None,
) -> RunCodeOutput:
    """Run the sandbox agent on `task` until it reports, or a breaker or its budget stops it."""
    registry = ToolRegistry(
        sandbox_agent_tools(provider, workspace, skills),
        config=tools.model_copy(
            update={
                "max_round_trips": config.max_iterations,
                # each command has its own limits inside; the registry's wait covers them
                "call_timeout_seconds": config.wall_seconds + 10,
            }
        ),
    )
    spent = 0
    budget_stop: list[str] = []

    async def budgeted(prompt: Prompt, specs: Sequence[ToolSpec]) -> Completion:
        nonlocal spent
        if spent >= config.max_task_tokens:  # checked before each call, never after the fact
            budget_stop.append(f"token budget of {config.max_task_tokens} spent ({spent})")
            return Completion(
                text=f"[Stopped: this task's token budget of {config.max_task_tokens} is spent.]"
            )
        completion = await complete(prompt, specs)
        spent += completion.usage.input_tokens + completion.usage.output_tokens
        return completion

    prompt = Prompt(system=instruction(config, tuple(skills or ())), items=(UserTurn(text=task),))
    breaker = LoopBreaker(
        max_round_trips=config.max_iterations,
        max_identical_calls=tools.max_identical_calls,
        max_calls_per_round=tools.max_calls_per_round,
    )
    try:
        result = await run_tool_loop(prompt, registry, budgeted, breaker=breaker)
    except ModelError as exc:
        raise ToolError(f"the sandbox agent's model failed: {exc}") from exc
    steps = [
        f"{o.name}({_brief(o.arguments)}) → {_ending(o.output, o.status.value)}" for o in result.outcomes
    ]
    stopped = budget_stop[0] if budget_stop else None
    if stopped is None and result.trips:
        stopped = "; ".join(dict.fromkeys(trip.reason for trip in result.trips))
    report = result.text.strip() or "(the sandbox agent stopped without a report)"
    return RunCodeOutput(
        report=report, steps=steps, model_calls=result.model_calls, tokens=spent, stopped=stopped
    )


def _brief(arguments: str, limit: int = 120) -> str:
    return arguments if len(arguments) <= limit else arguments[:limit] + "…"


def _ending(output: dict[str, Any] | None, status: str) -> str:
    if output is None:
        return status
    stopped = output.get("stopped")
    return f"exit {output.get('exit_code')}" + (f", {stopped}" if stopped else "")


@dataclass(frozen=True)
class RunCodeContext:
    provider: SandboxProvider
    # The host folder of the workspace this task may use, decided when the task starts from
    # the run's provenance at that moment (`tools/sandbox/workspace.py`).
    workspace: Callable[[], Awaitable[Path]]
    complete: CompleteFn  # one `sandbox` model round-trip through the agent's gateway
    config: SandboxConfig
    tools: ToolsConfig
    # The agent's skills (name → folder), read when a task starts: mounted read-only inside.
    skills: Callable[[], Mapping[str, Path]] | None = None


def run_code_tool(context: RunCodeContext) -> Tool[RunCodeInput, RunCodeOutput]:
    async def run_code(arguments: RunCodeInput) -> RunCodeOutput:
        # A full data volume refuses the task before any model call: the store keeps its reserve.
        context.provider.reserve.check(context.provider.claim_bytes)
        return await delegate(
            arguments.task,
            context.provider,
            await context.workspace(),
            context.complete,
            context.config,
            context.tools,
            context.skills() if context.skills is not None else None,
        )

    return Tool(
        "run_code",
        (
            "Delegate a programming task (compute, transform data, test a snippet, run a skill's script) "
            "to a sandbox agent that writes and runs code in isolation and reports back. Describe the "
            "task fully: it does not see this conversation. Its files stay in the sandbox workspace of "
            "this conversation's compartment (only runs that may see them share it)."
        ),
        RunCodeInput,
        RunCodeOutput,
        run_code,
        timeout_seconds=(context.config.max_iterations + 2) * (context.config.wall_seconds + 10),
    )
