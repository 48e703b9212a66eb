"""Isolated execution environments for delegated code (SPEC §4.6): the providers `run_code`'s
sandbox agent runs every file and command operation through. Nothing here runs model-written
code on the host: a provider either isolates it or is not offered.

Providers (`SandboxProvider`), tried in this order by `provider = "auto"`:

- **bubblewrap** (`bwrap`): new user, mount, PID, IPC, UTS and network namespaces; the host's
  `/usr` read-only and a few files of `/etc`; a private `/tmp`, `/proc` and `/dev`; the
  workspace at `/workspace` (the only persistent writable place: a tmpfs of `[sandbox]
  workspace_mb`, restored from and saved to an archive inside, `tools/sandbox/_disk.py`);
  all capabilities dropped,
  running as `nobody`; killed with its parent. Limits are set inside with `prlimit` (CPU
  seconds, address space, file size, open files, processes) and the wall clock from here (the
  whole process group is killed). The process count is also held by a pids cgroup per command
  where one is writable (`tools/sandbox/_pids_cgroup.py`: RLIMIT_NPROC does not bind a root host user). `network = "none"` additionally installs a seccomp filter that
  refuses IP sockets (and io_uring, which could open them), so not even the sandbox's own
  loopback is usable; `loopback` keeps the private namespace with its own loopback only;
  `full` shares the host's network.
- **runsc** (gVisor) `runsc --network=... --root=STATE do CMD`: a user-space kernel between
  the code and the host. `runsc do` shows the host's file system through an overlay, so its
  isolation is what `persyn sandbox check` reports, not what is assumed.
- **docker**, when a daemon answers: `docker run --rm` with the workspace bound, no
  capabilities, a read-only root, memory, CPU and process limits.

runsc and docker bind the workspace's folder `files/` and hold no quota on it (`persyn sandbox
check` says so). Every provider refuses to start a command that could take the data volume's
`[sandbox] reserve_mb` (`DiskReserve`).

Detection (`detect_provider`) really starts the provider once (`true` inside it): an installed
bwrap that cannot create user namespaces (or is too old for `--size`) is reported with its own
error, never used.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import struct
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

from persyn.core.config.sandbox import SandboxConfig
from persyn.core.errors import ToolError
from persyn.tools.sandbox._disk import SAVED_MARK, ArchiveTransfer, DiskReserve, archive_cap
from persyn.tools.sandbox._pids_cgroup import PidsCgroup
from persyn.tools.sandbox.workspace import WORKSPACE_ARCHIVE, WORKSPACE_FILES

__all__ = [
    "CommandResult",
    "DetectedProvider",
    "PassedFds",
    "SandboxProvider",
    "detect_provider",
    "ip_socket_filter",
]

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_HOST_DIR = "/host"
SANDBOX_SKILLS = "/skills"  # the agent's skills, read-only: /skills/NAME/SKILL.md, scripts/, ...
_OUTPUT_LIMIT = 64_000  # bytes of stdout and of stderr kept per command
_PATH = "/usr/local/bin:/usr/bin:/bin"
# Files of /etc programs commonly need (dynamic loader cache, alternatives, time zone); with
# `network = "full"` also name resolution and certificates.
_ETC = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime", "/etc/mime.types")
_ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/etc/ca-certificates")


class CommandResult(BaseModel):
    """How one command inside the sandbox ended."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None  # None: killed at the wall-clock limit
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: str | None = None  # the signal that ended it (SIGXCPU: out of CPU time; SIGKILL...)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int
    memory_mb: int
    wall_seconds: float
    max_file_mb: int
    max_processes: int = 64
    workspace_mb: int = 256

    @classmethod
    def from_config(cls, config: SandboxConfig) -> Limits:
        return cls(
            config.cpu_seconds,
            config.memory_mb,
            config.wall_seconds,
            config.max_file_mb,
            config.max_processes,
            config.workspace_mb,
        )

    @property
    def workspace_bytes(self) -> int:
        return self.workspace_mb * 1024 * 1024

    def prlimit(self) -> list[str]:
        mib = 1024 * 1024
        return [
            "prlimit",
            f"--cpu={self.cpu_seconds}",
            f"--as={self.memory_mb * mib}",
            f"--fsize={self.max_file_mb * mib}",
            "--nofile=256",
            # Holds for a non-root host user only (kuid 0 is exempt): see `_pids_cgroup.py`.
            f"--nproc={self.max_processes}",
            "--core=0",
            "--",
        ]


@dataclass(frozen=True)
class PassedFds:
    """Descriptors a command's sandbox is handed: its seccomp filter, the archive its workspace
    is restored from (None: a new workspace) and the pipe it is saved to."""

    seccomp: int | None = None
    restore: int | None = None
    save: int | None = None


class SandboxProvider(ABC):
    """Runs one shell command in a workspace, isolated. `run` never runs anything on the host
    itself; a provider that cannot isolate raises `ToolError`, and one that would take the
    data volume's reserve refuses (`ToolError`, nothing runs)."""

    name: str
    pids: PidsCgroup | None = None  # the per-command pids cgroup, where the provider uses one
    holds_quota = False  # True: `[sandbox] workspace_mb` is enforced inside (a sized tmpfs)

    def __init__(self, config: SandboxConfig, executable: str, reserve: DiskReserve | None = None) -> None:
        self.config = config
        self.executable = executable
        self.limits = Limits.from_config(config)
        self.reserve = reserve or DiskReserve(Path.cwd(), config.reserve_mb * 1024 * 1024)
        self._locks: dict[Path, asyncio.Lock] = {}

    @property
    def claim_bytes(self) -> int:
        """What one command may add to the data volume (claimed against the reserve)."""
        return archive_cap(self.limits.workspace_bytes)

    @abstractmethod
    def argv(
        self,
        workspace: Path,
        command: str,
        fds: PassedFds = PassedFds(),
        read_only: Mapping[str, Path] | None = None,
    ) -> list[str]:
        """The host command line that runs `command` inside the sandbox, in the workspace
        whose host folder is `workspace` (`fds`: what it is handed; `read_only`: host folders
        shown read-only at the given paths inside, under `/skills`)."""

    def pass_fds(self) -> tuple[int, ...]:
        """Descriptors the provider hands the sandbox (closed here once it has started)."""
        return ()

    def confined(self) -> contextlib.AbstractAsyncContextManager[list[str]]:
        """Where a command runs on the host side: an argv prefix (none by default)."""
        return contextlib.nullcontext([])

    async def run(
        self,
        workspace: Path,
        command: str,
        *,
        stdin: bytes | None = None,
        read_only: Mapping[str, Path] | None = None,
        keep: bool = True,
    ) -> CommandResult:
        """`command` in the workspace whose host folder is `workspace`; `keep=False` (probes)
        keeps none of its changes and claims nothing of the reserve. Commands in one workspace
        take turns in this process: each restores the archive the one before it saved."""
        lock = self._locks.setdefault(workspace, asyncio.Lock())
        async with lock:
            with self.reserve.claim(self.claim_bytes) if keep else contextlib.nullcontext():
                async with self.confined() as prefix:
                    return await self._run(prefix, workspace, command, stdin, read_only, keep)

    async def _run(
        self,
        prefix: list[str],
        workspace: Path,
        command: str,
        stdin: bytes | None,
        read_only: Mapping[str, Path] | None,
        keep: bool,
    ) -> CommandResult:
        _make_directory(workspace if self.holds_quota else workspace / WORKSPACE_FILES)
        transfer = (
            ArchiveTransfer(workspace, WORKSPACE_ARCHIVE, self.claim_bytes, self.reserve)
            if self.holds_quota
            else None
        )
        seccomp = self.pass_fds()
        passed = PassedFds(
            seccomp=seccomp[0] if seccomp else None,
            restore=transfer.source if transfer is not None else None,
            save=transfer.sink if transfer is not None else None,
        )
        fds = (*seccomp, *(transfer.fds if transfer is not None else ()))
        try:
            argv = [*prefix, *self.argv(workspace, command, passed, read_only)]
            child = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=fds,
                start_new_session=True,  # its own process group: the wall clock kills all of it
                env={"PATH": _PATH, "LANG": "C.UTF-8"},
            )
        except BaseException:
            if transfer is not None:
                transfer.discard()
            raise
        finally:
            for fd in seccomp:
                os.close(fd)
        if transfer is not None:
            transfer.started()
        try:
            return await self._wait(child, stdin, transfer, keep)
        finally:
            if transfer is not None:
                transfer.discard()

    async def _wait(
        self,
        child: asyncio.subprocess.Process,
        stdin: bytes | None,
        transfer: ArchiveTransfer | None,
        keep: bool,
    ) -> CommandResult:
        timed_out = False
        try:
            async with asyncio.timeout(self.limits.wall_seconds):
                out, err = await child.communicate(stdin)
        except TimeoutError:
            timed_out = True
            out, err = b"", b""
        finally:
            if child.returncode is None:  # out of time or cancelled: the whole group goes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                await child.wait()
        code = child.returncode
        died = signal.Signals(-code).name if code is not None and code < 0 else None
        if code is not None and code > 128 and code - 128 in signal.valid_signals():
            died = signal.Signals(code - 128).name  # the shell inside reports its child's signal
        notes = f"\n[stopped after {self.limits.wall_seconds:g} s]" if timed_out else ""
        if transfer is not None:
            unkept = await transfer.finish(keep and not timed_out)
            if timed_out and keep:
                unkept = "the command was stopped before it ended"
            if unkept is not None:
                notes += f"\n[the workspace is as it was before this command: {unkept}]"
        return CommandResult(
            exit_code=None if timed_out else code,
            stdout=_text(out),
            stderr=_text(err) + notes,
            timed_out=timed_out,
            signal="SIGKILL" if timed_out else died,
        )


class BubblewrapProvider(SandboxProvider):
    name = "bubblewrap"
    holds_quota = True

    def __init__(
        self,
        config: SandboxConfig,
        executable: str,
        pids: PidsCgroup | None = None,
        reserve: DiskReserve | None = None,
    ) -> None:
        super().__init__(config, executable, reserve)
        self._filter = ip_socket_filter() if config.network == "none" else None
        self.pids = pids

    def confined(self) -> contextlib.AbstractAsyncContextManager[list[str]]:
        """Each command in a pids cgroup of its own when one is writable here: the process
        limit that holds whoever runs Persyn (`tools/sandbox/_pids_cgroup.py`)."""
        if self.pids is None:
            return contextlib.nullcontext([])
        return self.pids.command(self.limits.max_processes)

    def pass_fds(self) -> tuple[int, ...]:
        if self._filter is None:
            return ()
        read, write = os.pipe()  # the filter fits in the pipe's buffer: bwrap reads it at start
        os.write(write, self._filter)
        os.close(write)
        return (read,)

    def argv(
        self,
        workspace: Path,
        command: str,
        fds: PassedFds = PassedFds(),
        read_only: Mapping[str, Path] | None = None,
    ) -> list[str]:
        argv = [self.executable, "--die-with-parent", "--new-session", "--unshare-all"]
        if self.config.network == "full":
            argv.append("--share-net")
        argv += ["--cap-drop", "ALL", "--uid", "65534", "--gid", "65534", "--hostname", "sandbox"]
        argv += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib64", "sbin"):
            target = Path("/") / name
            if target.is_symlink():  # merged /usr: keep the same links
                argv += ["--symlink", os.readlink(target), str(target)]
            elif target.exists():
                argv += ["--ro-bind", str(target), str(target)]
        etc = _ETC + (_ETC_NETWORK if self.config.network == "full" else ())
        for path in etc:
            argv += ["--ro-bind-try", path, path]
        # The quota is the kernel's: tmpfs sized by bubblewrap, full at `workspace_mb` (ENOSPC).
        size = str(self.limits.workspace_bytes)
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp"]
        argv += ["--size", size, "--tmpfs", SANDBOX_WORKSPACE]
        if self.config.host_dir is not None:
            mode = "--bind" if self.config.host_dir_mode == "rw" else "--ro-bind"
            argv += [mode, self.config.host_dir, SANDBOX_HOST_DIR]
        for inside, folder in sorted(_read_only(read_only).items()):
            argv += ["--ro-bind", str(folder), inside]
        argv += ["--chdir", SANDBOX_WORKSPACE, "--clearenv"]
        argv += [
            "--setenv",
            "PATH",
            _PATH,
            "--setenv",
            "HOME",
            SANDBOX_WORKSPACE,
            "--setenv",
            "LANG",
            "C.UTF-8",
        ]
        argv += ["--setenv", "TMPDIR", "/tmp"]
        if fds.seccomp is not None:
            argv += ["--seccomp", str(fds.seccomp)]
        script = _persisting_shell(self.limits.prlimit(), fds.restore, fds.save)
        argv += ["--", "/bin/sh", "-c", script, "sandbox", command]
        return argv


def _persisting_shell(prlimit: list[str], restore: int | None, save: int | None) -> str:
    """The shell that runs a command in the sandbox: it restores the workspace from the pipe
    `restore`, runs the command (`$1`, under `prlimit`), then archives the workspace to the
    pipe `save` and marks it complete. The command's exit status is the shell's. The pipes are
    named by path (`/dev/fd/N`): the shell cannot redirect a descriptor above 9."""
    lines = ["cd /workspace || exit 125"]
    if restore is not None:
        # A damaged archive (the workspace's own code can write to the pipe it is saved to)
        # restores what it can: the compartment's files are the compartment's business.
        lines.append(
            f"tar -x -f - --no-same-owner -C /workspace </dev/fd/{restore} 2>/dev/null"
            ' || echo "[the workspace could not be fully restored]" >&2'
        )
    lines.append(" ".join(prlimit) + ' /bin/sh -c "$1"')
    lines.append("status=$?")
    if save is not None:
        mark = SAVED_MARK.decode().strip()
        lines.append(
            f"cd / && tar -c -f - --numeric-owner -C /workspace . >/dev/fd/{save} 2>/dev/null"
            f" && echo '{mark}' >/dev/fd/{save}"
        )
    lines.append('exit "$status"')
    return "\n".join(lines)


class RunscProvider(SandboxProvider):
    name = "runsc"

    def argv(
        self,
        workspace: Path,
        command: str,
        fds: PassedFds = PassedFds(),
        read_only: Mapping[str, Path] | None = None,
    ) -> list[str]:
        # `runsc do` shows the host's file system through an overlay: a skill's folder is at its own
        # host path there, not under /skills (`persyn sandbox check` says what it isolates).
        state = workspace / ".runsc-state"
        files = workspace / WORKSPACE_FILES
        state.mkdir(parents=True, exist_ok=True)
        network = "host" if self.config.network == "full" else "none"
        shell = (
            f"cd {_quote(str(files))} && "
            + " ".join(self.limits.prlimit())
            + f" /bin/sh -c {_quote(command)}"
        )
        return [self.executable, f"--network={network}", f"--root={state}", "do", "/bin/sh", "-c", shell]


class DockerProvider(SandboxProvider):
    name = "docker"

    def argv(
        self,
        workspace: Path,
        command: str,
        fds: PassedFds = PassedFds(),
        read_only: Mapping[str, Path] | None = None,
    ) -> list[str]:
        network = "host" if self.config.network == "full" else "none"
        argv = [self.executable, "run", "--rm", "-i", f"--network={network}", "--cap-drop=ALL"]
        tmp = f"--tmpfs=/tmp:size={self.limits.workspace_mb}m"
        argv += ["--security-opt=no-new-privileges", "--read-only", tmp, "--pids-limit=256"]
        argv += [f"--memory={self.limits.memory_mb}m", "--cpus=1", f"--ulimit=cpu={self.limits.cpu_seconds}"]
        files = workspace / WORKSPACE_FILES
        argv += ["--user=65534:65534", "-v", f"{files}:{SANDBOX_WORKSPACE}", "-w", SANDBOX_WORKSPACE]
        if self.config.host_dir is not None:
            argv += ["-v", f"{self.config.host_dir}:{SANDBOX_HOST_DIR}:{self.config.host_dir_mode}"]
        for inside, folder in sorted(_read_only(read_only).items()):
            argv += ["-v", f"{folder}:{inside}:ro"]
        return [*argv, self.config.docker_image, "/bin/sh", "-c", command]


@dataclass(frozen=True)
class DetectedProvider:
    """What `detect_provider` found: the provider to use, or none and why (one reason per
    provider tried)."""

    provider: SandboxProvider | None
    reasons: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        if self.provider is not None:
            return (
                f"{self.provider.name} ({self.provider.executable}, network {self.provider.config.network})"
            )
        return "; ".join(self.reasons) or "disabled"


async def detect_provider(config: SandboxConfig, workspace_root: Path) -> DetectedProvider:
    """The first configured provider that is present and really isolates a `true` command."""
    if not config.enabled:
        return DetectedProvider(None, ("[sandbox] enabled = false",))
    order = ("bubblewrap", "runsc", "docker") if config.provider == "auto" else (config.provider,)
    reasons: list[str] = []
    for name in order:
        provider, reason = await _try(name, config, workspace_root)
        if provider is not None:
            return DetectedProvider(provider, tuple(reasons))
        reasons.append(reason)
    return DetectedProvider(None, tuple(reasons))


async def _try(name: str, config: SandboxConfig, root: Path) -> tuple[SandboxProvider | None, str]:
    program = {"bubblewrap": "bwrap", "runsc": "runsc", "docker": "docker"}[name]
    executable = shutil.which(program)
    if executable is None:
        hint = {"bubblewrap": " (apt-get install bubblewrap)", "runsc": " (gVisor is not packaged in Debian)"}
        return None, f"{name}: {program!r} is not installed{hint.get(name, '')}"
    if name == "docker":
        info = await _quiet(executable, "info", "--format", "{{.ServerVersion}}")
        if info is not None:
            return None, f"docker: no daemon answers ({info})"
    provider: SandboxProvider
    reserve = DiskReserve(root, config.reserve_mb * 1024 * 1024)
    if name == "bubblewrap":
        provider = BubblewrapProvider(config, executable, PidsCgroup.find(), reserve)
    else:
        provider = {"runsc": RunscProvider, "docker": DockerProvider}[name](config, executable, reserve)
    probe = root / ".probe"
    try:
        result = await provider.run(probe, "true", keep=False)
    except (OSError, ToolError) as exc:
        return None, f"{name}: cannot start: {exc}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if not result.ok:
        why = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        return None, f"{name}: cannot start a sandbox here: {why}"
    return provider, ""


async def _quiet(*argv: str) -> str | None:
    """None when the command succeeds, else the last line it printed."""
    child = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(10):
            out, err = await child.communicate()
    except TimeoutError:
        child.kill()
        await child.wait()
        return "timed out"
    if child.returncode == 0:
        return None
    lines = (err or out).decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {child.returncode}"


def ip_socket_filter() -> bytes:
    """A classic-BPF seccomp program (x86-64) that refuses `socket(AF_INET|AF_INET6, ...)` and
    `io_uring_setup` with EACCES and allows everything else; other architectures' system
    calls (x32, i386) are refused or killed so they cannot go around it."""
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ERRNO | EACCES
    program = [
        (ld, 0, 0, 4),  # 0: seccomp_data.arch
        (jeq, 1, 0, 0xC000003E),  # 1: AUDIT_ARCH_X86_64 → 3
        (ret, 0, 0, 0x80000000),  # 2: another ABI: kill the process
        (ld, 0, 0, 0),  # 3: seccomp_data.nr
        (jge, 0, 1, 0x40000000),  # 4: an x32 system call → 5
        (ret, 0, 0, 0x00050000 | 38),  # 5: ENOSYS
        (jeq, 5, 0, 425),  # 6: io_uring_setup → deny
        (jeq, 0, 3, 41),  # 7: socket → 8, else allow
        (ld, 0, 0, 16),  # 8: args[0] (the address family), low word
        (jeq, 2, 0, 2),  # 9: AF_INET → deny
        (jeq, 1, 0, 10),  # 10: AF_INET6 → deny
        (ret, 0, 0, allow),  # 11
        (ret, 0, 0, deny),  # 12
    ]
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in program)


def _read_only(mounts: Mapping[str, Path] | None) -> dict[str, Path]:
    """Read-only mounts, each checked to land under /skills (never over the workspace or /usr)."""
    checked: dict[str, Path] = {}
    for inside, folder in (mounts or {}).items():
        target = PurePosixPath(inside)
        if target.parent != PurePosixPath(SANDBOX_SKILLS) or target.name in ("", ".", ".."):
            raise ToolError(f"a read-only mount must be {SANDBOX_SKILLS}/NAME, not {inside!r}")
        checked[str(target)] = folder
    return checked


def _make_directory(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _text(data: bytes) -> str:
    if len(data) > _OUTPUT_LIMIT:
        cut = len(data) - _OUTPUT_LIMIT
        data = data[:_OUTPUT_LIMIT] + f"\n[… {cut} more bytes cut]".encode()
    return data.decode(errors="replace")
