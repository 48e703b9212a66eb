"""The sandbox providers with real bubblewrap (SPEC §4.6): what a command inside can and cannot
reach, judged from the host; limits that stop a runaway; detection that never falls back to
the host; the network setting checked at start-up."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest

import needs
from persyn.core.config import load_settings
from persyn.core.config.sandbox import SandboxConfig
from persyn.core.errors import ConfigError, ToolError
from persyn.tools.sandbox._disk import archive_cap
from persyn.tools.sandbox.isolation import SandboxProvider, detect_provider
from persyn.tools.sandbox.service import run_probes

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason=needs.reason("bubblewrap (bwrap)"))


async def _provider(tmp_path: Path, **config: object) -> SandboxProvider:
    detected = await detect_provider(SandboxConfig.model_validate(config), tmp_path / "sandbox")
    assert detected.provider is not None, detected.reasons
    return detected.provider


@needs_bwrap
@pytest.mark.parametrize("network", ["none", "loopback"])
async def test_every_probe_fails_closed(tmp_path: Path, network: str) -> None:
    provider = await _provider(tmp_path, network=network)
    assert provider.name == "bubblewrap"
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("the host's secret")
    probes = {p.name.split(" (")[0]: p for p in await run_probes(provider, tmp_path / "sandbox" / "a", home)}
    assert probes["write outside the workspace"].isolated
    assert probes["TCP to the host's loopback"].isolated
    assert probes["read the host's home"].isolated
    assert probes["write past the workspace quota"].isolated  # the tmpfs fills first
    # `none` refuses even a socket; `loopback` has one, but only its own loopback behind it.
    assert probes["open an IP socket"].isolated is (network == "none")
    assert not (tmp_path / "sandbox" / ".escape").exists()
    assert sorted(p.name for p in (tmp_path / "sandbox").iterdir()) == ["a"]


@needs_bwrap
async def test_full_network_reaches_the_host_loopback_and_says_so(tmp_path: Path) -> None:
    provider = await _provider(tmp_path, network="full")
    probes = await run_probes(provider, tmp_path / "sandbox" / "a", tmp_path)
    loopback = next(p for p in probes if p.name.startswith("TCP"))
    assert not loopback.isolated and loopback.expected_open
    assert next(p for p in probes if p.name.startswith("write")).isolated


@needs_bwrap
async def test_the_workspace_persists_and_nothing_else_does(tmp_path: Path) -> None:
    provider = await _provider(tmp_path)
    workspace = tmp_path / "sandbox" / "a"
    first = await provider.run(workspace, "echo kept > kept.txt; echo lost > /tmp/lost.txt; id -u")
    assert first.ok and first.stdout.strip() == "65534"
    second = await provider.run(workspace, "cat kept.txt; cat /tmp/lost.txt")
    assert second.stdout == "kept\n" and "No such file" in second.stderr
    # On the host the workspace is one archive, written by the sandbox, never extracted here.
    assert sorted(p.name for p in workspace.iterdir()) == ["workspace.tar"]
    with tarfile.open(workspace / "workspace.tar") as archive:
        assert "./kept.txt" in archive.getnames()


@needs_bwrap
async def test_a_command_stopped_at_the_wall_clock_keeps_no_changes(tmp_path: Path) -> None:
    provider = await _provider(tmp_path, wall_seconds=2)
    workspace = tmp_path / "sandbox" / "a"
    assert (await provider.run(workspace, "echo one > state.txt")).ok
    stopped = await provider.run(workspace, "echo two > state.txt; sleep 60")
    assert stopped.timed_out and "the workspace is as it was before this command" in stopped.stderr
    assert (await provider.run(workspace, "cat state.txt")).stdout == "one\n"


@needs_bwrap
async def test_the_workspace_quota_holds_inside_and_on_the_host(tmp_path: Path) -> None:
    provider = await _provider(tmp_path, workspace_mb=4)
    workspace = tmp_path / "sandbox" / "a"
    full = await provider.run(workspace, "for i in 1 2 3; do head -c 2000000 /dev/zero > f$i; done; du -sk .")
    assert "No space left on device" in full.stderr
    assert (workspace / "workspace.tar").stat().st_size <= archive_cap(4 * 1024 * 1024)
    # Junk written straight into every descriptor the sandbox holds (the save pipe too) is
    # counted by the host and past the cap kept nowhere: the workspace stays as it was.
    before = (workspace / "workspace.tar").read_bytes()
    junk = await provider.run(
        workspace,
        "for f in /proc/1/fd/* /proc/$$/fd/*; do head -c 9000000 /dev/zero > $f; done 2>/dev/null; true",
    )
    assert "the workspace is as it was before this command" in junk.stderr
    assert (workspace / "workspace.tar").read_bytes() == before
    assert sorted(p.name for p in workspace.iterdir()) == ["workspace.tar"]


@needs_bwrap
async def test_a_host_directory_is_mapped_read_only_unless_asked(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.csv").write_text("a,b\n1,2\n")
    provider = await _provider(tmp_path, host_dir=str(shared))
    result = await provider.run(tmp_path / "sandbox" / "a", "cat /host/data.csv; echo x > /host/new.txt")
    assert result.stdout == "a,b\n1,2\n" and "Read-only file system" in result.stderr
    assert not (shared / "new.txt").exists()
    writable = await _provider(tmp_path, host_dir=str(shared), host_dir_mode="rw")
    assert (await writable.run(tmp_path / "sandbox" / "a", "echo x > /host/new.txt")).ok
    assert (shared / "new.txt").read_text() == "x\n"


@needs_bwrap
async def test_limits_stop_a_runaway(tmp_path: Path) -> None:
    # The CPU limit ends the loop, however slowly a loaded machine gets through its second.
    provider = await _provider(tmp_path, cpu_seconds=1, memory_mb=200, wall_seconds=600)
    workspace = tmp_path / "sandbox" / "a"
    spin = await provider.run(workspace, "python3 -c 'while True: pass'")
    assert not spin.ok and spin.signal in ("SIGXCPU", "SIGKILL") and not spin.timed_out
    hog = await provider.run(workspace, "python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'")
    assert not hog.ok and "MemoryError" in hog.stderr
    clocked = await _provider(tmp_path, wall_seconds=2)
    sleeper = await clocked.run(workspace, "sleep 60 & sleep 60; echo never")
    assert sleeper.timed_out and sleeper.exit_code is None and "never" not in sleeper.stdout
    big = await provider.run(workspace, "head -c 100000000 /dev/zero > big.bin")
    assert not big.ok or (workspace / "big.bin").stat().st_size <= 64 * 1024 * 1024


def _process_limit_holds(provider: SandboxProvider) -> bool:
    """A pids cgroup, or a non-root host user (RLIMIT_NPROC binds everyone but kuid 0)."""
    return provider.pids is not None or os.getuid() != 0


# Starts up to 200 children that wait, counting the forks that succeed (without a limit all
# of them do: measured, 105 of 100 shell jobs under `prlimit --nproc=32` alone, as root).
_SPAWN_200 = (
    "python3 -c 'import os, time\n"
    "children = []\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        continue\n"
    "    if pid == 0:\n"
    "        time.sleep(5); os._exit(0)\n"
    "    children.append(pid)\n"
    'print("started", len(children), flush=True)\n'
    "for pid in children:\n"
    "    os.kill(pid, 9)'"
)


def _leftover_cgroups(provider: SandboxProvider) -> list[str]:
    pids = provider.pids
    return [] if pids is None else [p.name for p in pids.base.iterdir() if p.is_dir()]


@needs_bwrap
async def test_a_process_count_limit_stops_a_spawning_command(tmp_path: Path) -> None:
    provider = await _provider(tmp_path, max_processes=32, wall_seconds=20)
    if not _process_limit_holds(provider):
        pytest.skip("no writable pids cgroup and the host user is root: no process limit can hold here")
    result = await provider.run(tmp_path / "sandbox" / "a", _SPAWN_200)
    started = [line for line in result.stdout.splitlines() if line.startswith("started ")]
    # bwrap, the shell and python take a few of the 32: far fewer than 200 children ever ran.
    assert started and int(started[0].split()[1]) < 32, result
    assert not result.timed_out
    assert _leftover_cgroups(provider) == []  # each command's cgroup is gone with it


@needs_bwrap
async def test_a_fork_bomb_is_held_at_the_limit_and_the_host_goes_on(tmp_path: Path) -> None:
    # A real fork bomb, run only where a limit holds, with a short wall clock.
    provider = await _provider(tmp_path, max_processes=16, wall_seconds=3, cpu_seconds=3)
    if not _process_limit_holds(provider):
        pytest.skip("no writable pids cgroup and the host user is root: no process limit can hold here")
    workspace = tmp_path / "sandbox" / "a"
    await provider.run(workspace, "b() { b | b & }; b; wait")
    after = await provider.run(workspace, "echo still here")
    assert after.ok and after.stdout == "still here\n"
    assert _leftover_cgroups(provider) == []


@needs_bwrap
async def test_a_skill_script_runs_inside_from_its_read_only_folder(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "greeter"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: greeter\ndescription: Greets.\n---\nRun scripts/greet.py.\n")
    (skill / "scripts" / "greet.py").write_text("import sys, os\nprint('hello', sys.argv[1], os.getuid())\n")
    provider = await _provider(tmp_path)
    mounts = {"/skills/greeter": skill}
    workspace = tmp_path / "sandbox" / "a"
    ran = await provider.run(workspace, "python3 /skills/greeter/scripts/greet.py Ada", read_only=mounts)
    assert ran.ok and ran.stdout == "hello Ada 65534\n"
    tamper = await provider.run(
        workspace,
        "echo changed > /skills/greeter/scripts/greet.py; rm /skills/greeter/SKILL.md; "
        "touch /skills/greeter/new; ls /skills/greeter",
        read_only=mounts,
    )
    assert tamper.stderr.count("Read-only file system") == 3
    assert sorted(p.name for p in skill.iterdir()) == ["SKILL.md", "scripts"]
    assert (skill / "scripts" / "greet.py").read_text().startswith("import sys")
    # Without the mount the skill is not there at all; and a mount lands only under /skills.
    assert not (await provider.run(workspace, "ls /skills/greeter")).ok
    with pytest.raises(ToolError, match="/workspace"):
        await provider.run(workspace, "true", read_only={"/workspace": skill})


async def test_no_provider_means_no_sandbox_and_says_why(tmp_path: Path) -> None:
    # runsc (gVisor) is not packaged for Debian; when this machine has none, asking for it
    # must give nothing — never the host.
    if shutil.which("runsc") is not None:
        pytest.skip("runsc is installed here")
    detected = await detect_provider(SandboxConfig(provider="runsc"), tmp_path)
    assert detected.provider is None
    assert detected.reasons == ("runsc: 'runsc' is not installed (gVisor is not packaged in Debian)",)
    off = await detect_provider(SandboxConfig(enabled=False), tmp_path)
    assert off.provider is None and off.summary == "[sandbox] enabled = false"


@pytest.mark.parametrize("value", ["", "loopbak", "host", "None"])
def test_an_unknown_network_is_rejected_at_start_up(tmp_path: Path, value: str) -> None:
    (tmp_path / "persyn.toml").write_text(f'[sandbox]\nnetwork = "{value}"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path, environ={})
    assert f"[sandbox] network {value!r} is not one of none, loopback, full" in str(raised.value)


@needs_bwrap
async def test_a_workspace_lives_as_long_as_its_agent(tmp_path: Path) -> None:
    from persyn.testing import ADA, harness_settings
    from persyn.tools.sandbox.service import SandboxService

    settings = harness_settings(tmp_path / "home")
    root = settings.data_dir / "sandbox"
    for agent_id in (ADA.id, "01GONEGONEGONEGONEGONEGONE"):
        (root / agent_id).mkdir(parents=True)
        (root / agent_id / "work.py").write_text("print(1)\n")
    (root / ADA.id / "outside").symlink_to(tmp_path)  # left by sandboxed code: never followed
    service = SandboxService(settings, {})
    assert (await service.start()).provider is not None
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [ADA.id]
    # What the agent's folder held before workspaces had compartments is set aside, given to
    # no run, and shown to the operator as a workspace of no compartment.
    (legacy,) = service.workspaces.listing(ADA.id)
    assert legacy.key == "legacy" and legacy.compartment is None and legacy.files == 2
    assert (root / ADA.id / "legacy" / "files" / "outside").is_symlink()
    assert service.workspaces.remove(ADA.id) == 1 and not (root / ADA.id).exists()
    assert (tmp_path / "home").is_dir()  # the symlink went, not what it pointed to
