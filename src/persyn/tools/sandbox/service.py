"""The sandbox of a deployment (SPEC §4.6): which provider isolates delegated code, the agents'
workspaces, the `run_code` tool bound to each agent's gateway, and the probes of
`persyn sandbox check`.

`SandboxService.start` detects the provider once (really starting it) and removes the
workspaces of agents that are no longer configured: a workspace lives as long as its agent.
`run_code` works in the workspace of the compartment its run's provenance allows, decided when
a task starts (`tools/sandbox/workspace.py`).
With no provider there is no `run_code` — never a host fallback — and `reason` says why, for
`persyn doctor` and the start-up notice.

The probes try, from inside, what isolation must prevent, and judge by what the *host* sees: a
file written outside the workspace is looked for on the host, a TCP connection to the host's
loopback is looked for at a listener the host holds open, the host's home is compared with
what the sandbox lists there. A probe that cannot run is reported as not isolated (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from persyn.core.config import Settings, Task
from persyn.gateway.base import Completion, Prompt, ToolSpec
from persyn.gateway.gateway import ModelGateway
from persyn.store.base import Provenance
from persyn.tools.registry import Tool
from persyn.tools.sandbox.agent import RunCodeContext, run_code_tool
from persyn.tools.sandbox.isolation import DetectedProvider, SandboxProvider, detect_provider
from persyn.tools.sandbox.workspace import SandboxWorkspaces, workspace_compartment

__all__ = ["Probe", "SandboxReport", "SandboxService", "check_sandbox"]


class SandboxService:
    """The deployment's sandbox: detected at `start`, one workspace per compartment of an agent."""

    def __init__(self, settings: Settings, gateways: Mapping[str, ModelGateway]) -> None:
        self.settings = settings
        self.gateways = gateways
        self.workspaces = SandboxWorkspaces(settings.data_dir / "sandbox")
        self.detected: DetectedProvider | None = None

    async def start(self) -> DetectedProvider:
        if self.detected is None:
            self.detected = await detect_provider(self.settings.sandbox, self.workspaces.root)
            if self.detected.provider is not None:
                self.workspaces.prune({agent.id for agent in self.settings.agents})
                for agent in self.settings.agents:
                    with contextlib.suppress(OSError):
                        self.workspaces.set_aside_legacy(agent.id)
        return self.detected

    @property
    def provider(self) -> SandboxProvider | None:
        return self.detected.provider if self.detected is not None else None

    def notice(self) -> str | None:
        """Why `run_code` is not offered, when the operator enabled it and it is not."""
        if self.detected is None or self.detected.provider is not None or not self.settings.sandbox.enabled:
            return None
        return f"run_code is not offered: no sandbox provider ({self.detected.summary})"

    def tool_for(
        self,
        agent_id: str,
        provenance: Callable[[], Awaitable[Provenance]],
        *,
        own: bool,
        run_id: str,
        skills: Callable[[], Mapping[str, Path]] | None = None,
    ) -> Tool[Any, Any] | None:
        """`run_code` for one activation of `agent_id`, or None without a provider or a
        gateway for the agent. A task works in the workspace `provenance()` (what the run
        writes, read when the task starts) allows; `own`: a self-initiated run, whose
        workspaces are never a conversation's; `run_id`: its event. `skills` (name → folder)
        are mounted read-only inside for each task."""
        provider = self.provider
        if provider is None or agent_id not in self.gateways:
            return None
        gateways = self.gateways
        workspaces = self.workspaces
        groups = self.settings.memory.channel_groups

        async def workspace() -> Path:
            compartment = workspace_compartment(
                await provenance(), groups, own=own, run_id=run_id, agent_id=agent_id
            )
            return workspaces.of(agent_id, compartment)

        async def complete(prompt: Prompt, specs: Sequence[ToolSpec]) -> Completion:
            gateway = gateways[agent_id]  # looked up at the call: a CLI builds it only then
            return await gateway.complete(Task.SANDBOX, prompt, tools=tuple(specs), stage="sandbox")

        return run_code_tool(
            RunCodeContext(
                provider=provider,
                workspace=workspace,
                complete=complete,
                config=self.settings.sandbox,
                tools=self.settings.tools,
                skills=skills,
            )
        )


# `persyn sandbox check` ---------------------------------------------------------------------------
class Probe(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    isolated: bool
    detail: str
    expected_open: bool = False  # open because the configuration says so (`network = "full"`)


class SandboxReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: str | None
    reason: str
    network: Literal["none", "loopback", "full"] | str
    workspace: str | None
    probes: tuple[Probe, ...] = ()

    @property
    def escaped(self) -> list[Probe]:
        return [p for p in self.probes if not p.isolated and not p.expected_open]


async def check_sandbox(settings: Settings, agent_id: str) -> SandboxReport:
    service = SandboxService(settings, {})
    detected = await service.start()
    network = settings.sandbox.network
    if detected.provider is None:
        return SandboxReport(provider=None, reason=detected.summary, network=network, workspace=None)
    # Probes run in a workspace of their own, never in one a compartment's files are in.
    scratch = service.workspaces.root / f".check-{secrets.token_hex(4)}"
    try:
        probes = await run_probes(detected.provider, scratch, Path.home())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SandboxReport(
        provider=detected.provider.name,
        reason=detected.summary,
        network=network,
        workspace=str(service.workspaces.agent_root(agent_id)),
        probes=tuple(probes),
    )


async def run_probes(provider: SandboxProvider, workspace: Path, home: Path) -> list[Probe]:
    full = provider.config.network == "full"
    return [
        await _probe_write_outside(provider, workspace),
        await _probe_host_loopback(provider, workspace, expected_open=full),
        await _probe_ip_socket(provider, workspace),
        await _probe_home(provider, workspace, home),
        await _probe_processes(provider, workspace),
        await _probe_quota(provider, workspace),
    ]


async def _probe_quota(provider: SandboxProvider, workspace: Path) -> Probe:
    """Tries to write 2 MiB more than `[sandbox] workspace_mb` into the workspace, 1 MiB a file."""
    quota = provider.limits.workspace_mb
    name = f"write past the workspace quota ({quota} MiB)"
    if not provider.holds_quota:
        return Probe(
            name=name, isolated=False, detail=f"{provider.name} holds no quota on the workspace folder"
        )
    tries = quota + 2
    script = (
        f"i=0; while [ $i -lt {tries} ]; do head -c 1048576 /dev/zero > .quota-$i || break; "
        "i=$((i + 1)); done; echo wrote $i"
    )
    result = await provider.run(workspace, script, keep=False)
    wrote = [line.split()[-1] for line in result.stdout.splitlines() if line.startswith("wrote ")]
    if not wrote:
        return Probe(name=name, isolated=False, detail=f"probe did not run: {result.stderr[-200:]}")
    if int(wrote[0]) >= tries:
        return Probe(name=name, isolated=False, detail=f"wrote {wrote[0]} MiB")
    last = (result.stderr.strip().splitlines() or ["refused"])[-1]
    return Probe(name=name, isolated=True, detail=f"full after {wrote[0]} MiB ({last[-80:]})")


_SPAWN = """import os, time
children = []
for _ in range({tries}):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    children.append(pid)
print("started", len(children), flush=True)
for pid in children:
    os.kill(pid, 9)
"""


async def _probe_processes(provider: SandboxProvider, workspace: Path) -> Probe:
    """Tries to start more waiting processes than `[sandbox] max_processes` allows."""
    limit = provider.limits.max_processes
    name = f"more than {limit} processes"
    script = _SPAWN.format(tries=limit + 16)
    result = await provider.run(workspace, f"python3 -c '{script}'", keep=False)
    found = [line.split()[-1] for line in result.stdout.splitlines() if line.startswith("started ")]
    if not found:
        return Probe(name=name, isolated=False, detail=f"probe did not run: {result.stderr[-200:]}")
    started = int(found[0])
    if started >= limit:
        return Probe(
            name=name,
            isolated=False,
            detail=f"{started} of {limit + 16} started: no process limit holds here (root host user, no pids cgroup)",
        )
    how = "pids cgroup" if provider.pids is not None else "RLIMIT_NPROC"
    return Probe(name=name, isolated=True, detail=f"{started} of {limit + 16} started, then refused ({how})")


async def _probe_write_outside(provider: SandboxProvider, workspace: Path) -> Probe:
    token = secrets.token_hex(6)
    targets = [workspace.parent / f".escape-{token}", Path(f"/tmp/.persyn-escape-{token}")]
    targets.append(Path(f"/usr/.persyn-escape-{token}"))
    script = "; ".join(f"echo escaped > '{t}' 2>/dev/null" for t in targets)
    result = await provider.run(workspace, script + "; true", keep=False)
    landed = _landed(targets)
    if landed:
        return Probe(name="write outside the workspace", isolated=False, detail=f"reached the host: {landed}")
    if not result.ok:
        return Probe(
            name="write outside the workspace",
            isolated=False,
            detail=f"probe did not run: {result.stderr[-200:]}",
        )
    return Probe(
        name="write outside the workspace",
        isolated=True,
        detail=f"nothing reached the host ({len(targets)} paths tried)",
    )


async def _probe_host_loopback(provider: SandboxProvider, workspace: Path, *, expected_open: bool) -> Probe:
    reached = asyncio.Event()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.set()
        writer.close()

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('connected')"
        result = await provider.run(workspace, f'python3 -c "{code}"', keep=False)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5 if "connected" in result.stdout else 0.05):
                await reached.wait()
    finally:
        server.close()
        await server.wait_closed()
    name = f"TCP to the host's loopback (127.0.0.1:{port})"
    if reached.is_set() or "connected" in result.stdout:
        return Probe(
            name=name, isolated=False, detail="the host's listener was reached", expected_open=expected_open
        )
    if "python3" in result.stderr and "not found" in result.stderr:
        return Probe(name=name, isolated=False, detail="probe did not run: no python3 inside")
    last = (result.stderr.strip().splitlines() or ["refused"])[-1]
    return Probe(name=name, isolated=True, detail=f"not reached ({last[-120:]})")


async def _probe_ip_socket(provider: SandboxProvider, workspace: Path) -> Probe:
    result = await provider.run(
        workspace, "python3 -c \"import socket; socket.socket(); print('opened')\"", keep=False
    )
    if "opened" in result.stdout:
        return Probe(
            name="open an IP socket",
            isolated=False,
            detail="allowed",
            expected_open=provider.config.network != "none",
        )
    last = (result.stderr.strip().splitlines() or ["refused"])[-1]
    return Probe(name="open an IP socket", isolated=True, detail=f"refused ({last[-120:]})")


async def _probe_home(provider: SandboxProvider, workspace: Path, home: Path) -> Probe:
    name = f"read the host's home ({home})"
    on_host = _listing(home)
    result = await provider.run(workspace, f"ls -A -- '{home}'", keep=False)
    inside = sorted(result.stdout.split())
    if result.ok and not on_host:
        return Probe(name=name, isolated=False, detail="the home is empty on the host: cannot tell")
    if result.ok and set(inside) & set(on_host):
        return Probe(name=name, isolated=False, detail=f"listed {len(inside)} entries of it")
    last = (result.stderr.strip().splitlines() or ["not there"])[-1]
    return Probe(name=name, isolated=True, detail=f"not visible ({last[-120:]})")


def _landed(targets: list[Path]) -> list[str]:
    """Which of `targets` exist on the host (removed: a probe leaves nothing behind)."""
    landed = [str(t) for t in targets if t.exists()]
    for target in landed:
        Path(target).unlink(missing_ok=True)
    return landed


def _listing(directory: Path) -> list[str]:
    try:
        return sorted(p.name for p in directory.iterdir())
    except OSError:
        return []
