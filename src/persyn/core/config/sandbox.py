"""The `[sandbox]` and `[artifacts]` sections (SPEC §4.6, §4.5): where delegated code runs, and
the shared, versioned documents agents write together.

`network` is checked by hand rather than as a `Literal` so that the error names the bad value
and says what it would have meant: a mistyped or empty value must stop the deployment, never
quietly open the sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from persyn.core.section import Section

__all__ = ["SANDBOX_NETWORKS", "ArtifactsConfig", "SandboxConfig"]

SANDBOX_NETWORKS = ("none", "loopback", "full")


class SandboxConfig(Section):
    """Sandboxed code execution by delegation (SPEC §4.6): `run_code` hands a task to a separate
    sandbox agent (model task `sandbox`) whose file and command tools run only inside an
    isolated environment. There is no host fallback: with no provider the tool is absent and
    `persyn doctor` says why."""

    enabled: bool = Field(
        default=True,
        description="Offer `run_code` when a sandbox provider is present (`persyn sandbox check` shows it).",
    )
    provider: Literal["auto", "bubblewrap", "runsc", "docker"] = Field(
        default="auto",
        description=(
            "Where code runs: `bubblewrap` (bwrap, user namespaces), `runsc` (gVisor), `docker` (needs a "
            "running daemon); `auto` takes the first present in that order."
        ),
    )
    network: str = Field(
        default="none",
        description=(
            "`none`: no IP sockets at all; `loopback`: a private network namespace with only its own "
            "loopback (the host's is not reachable); `full`: the host's network. Anything else is an error."
        ),
    )
    cpu_seconds: int = Field(default=30, ge=1, le=3600, description="CPU time of each command inside.")
    memory_mb: int = Field(
        default=1024, ge=64, le=65536, description="Address space of each process inside, in MiB."
    )
    wall_seconds: float = Field(
        default=60.0, gt=0, le=3600, description="Each command is killed after this long, whatever it does."
    )
    max_file_mb: int = Field(
        default=64, ge=1, le=4096, description="Largest file a command inside may write, in MiB."
    )
    max_processes: int = Field(
        default=64,
        ge=8,
        le=4096,
        description=(
            "Processes and threads one command inside may have at once (a fork bomb stops there): "
            "a pids cgroup where one is writable, and RLIMIT_NPROC inside. `persyn sandbox check` says "
            "which holds."
        ),
    )
    workspace_mb: int = Field(
        default=256,
        ge=1,
        le=65536,
        description=(
            "Size of each workspace inside the sandbox, in MiB (and of its /tmp): a write past it fails "
            "with 'No space left on device'. bubblewrap holds it with a size-limited tmpfs, kept between "
            "tasks as one archive of at most this size (plus 1/16 for tar's headers); runsc and docker do "
            "not (`persyn sandbox check` says so)."
        ),
    )
    reserve_mb: int = Field(
        default=512,
        ge=0,
        le=1_048_576,
        description=(
            "Free space on the data volume that sandbox runs never take, in MiB: a command (or a whole "
            "`run_code` task) is refused while free space is below this plus one workspace."
        ),
    )
    max_iterations: int = Field(
        default=12,
        ge=1,
        le=50,
        description="Model round-trips the sandbox agent gets per task; then it must report what it has.",
    )
    max_task_tokens: int = Field(
        default=60_000,
        ge=1000,
        description="Tokens one delegated task may spend; checked before each of its model calls.",
    )
    host_dir: str | None = Field(
        default=None,
        description=(
            "One host directory mapped into the sandbox at /host (unset: none). With `rw` it may be neither "
            "`/` nor a directory that holds this deployment (refused: the sandbox could rewrite them)."
        ),
        examples=["/srv/shared-code"],
    )
    host_dir_mode: Literal["ro", "rw"] = Field(
        default="ro", description="Whether the sandbox may change `host_dir` (`rw`) or only read it (`ro`)."
    )
    docker_image: str = Field(
        default="python:3.11-slim", description="The image the docker provider runs commands in."
    )

    @field_validator("network", mode="before")
    @classmethod
    def _known_network(cls, value: object) -> object:
        if value not in SANDBOX_NETWORKS:
            raise ValueError(
                f"[sandbox] network {value!r} is not one of {', '.join(SANDBOX_NETWORKS)} "
                "(an unknown value never opens the sandbox)"
            )
        return value

    @field_validator("host_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_absolute():
            raise ValueError(f"[sandbox] host_dir {value!r} must be an absolute path")
        return value

    @model_validator(mode="after")
    def _not_the_whole_host_writable(self) -> SandboxConfig:
        if (
            self.host_dir is not None
            and self.host_dir_mode == "rw"
            and Path(self.host_dir).resolve() == Path("/")
        ):
            raise ValueError(
                f"[sandbox] host_dir {self.host_dir!r} with host_dir_mode 'rw' gives code the model writes "
                "the whole host filesystem to change; map one directory, or use host_dir_mode 'ro'"
            )
        return self

    def writable_home(self, home: Path) -> bool:
        """Whether `host_dir` is mapped read-write and holds `home` (the deployment's own files:
        its configuration and database), which the sandbox could then rewrite."""
        if self.host_dir is None or self.host_dir_mode != "rw":
            return False
        return home.resolve().is_relative_to(Path(self.host_dir).resolve())


class ArtifactsConfig(Section):
    """Shared artifacts (SPEC §4.5): documents in a versioned store of the deployment, which agents
    read and write with `workspace_*` tools. An artifact belongs to the channel it was written
    from; it is visible from that channel and the channels of its compartment under
    `[memory] channel_groups`, never from elsewhere."""

    enabled: bool = Field(
        default=True, description="Offer `workspace_read`, `workspace_write`, `workspace_list`."
    )
    max_chars: int = Field(
        default=200_000, ge=100, le=5_000_000, description="Largest artifact version, in characters."
    )
