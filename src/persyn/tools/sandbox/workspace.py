"""Whose files a `run_code` workspace holds (SPEC §4.6, issue 33): one workspace per
compartment of an agent, chosen from the provenance of the run that delegates.

Files in a workspace are not provenanced one by one, so a workspace is shared only by runs
that may see *everything* any of them wrote: runs whose provenance maps to the same
`WorkspaceCompartment`. That is the rule `memory.access.may_surface` applies to a record,
made an equivalence:

- **public**: the compartment (the run's channel and every channel grouped with it, as a
  set), whoever is present. Two channels share it only when their compartments are equal,
  so each is in the other's (grouping is symmetric), and a public record of one surfaces on
  the other.
- **private**: the compartment *and exactly the people present* (the agent excluded).
  Not a subset: a run with fewer people would add what only they may hear, and the larger
  company would read it.
- **confidential** and **restricted**: the exact channel and exactly the people present (a
  channel group never widens them).
- A run on no channel (`channel` None: the agent on its own) shares by participants and
  sensitivity alone; one whose provenance can surface nowhere (no channel and confidential
  or above) gets a workspace of its own run only.

A self-initiated run (a heartbeat, a reminder) is keyed by its *derived* provenance
(`runtime.background.autonomy.run_provenance`, narrowed by all it read) and is kept apart from
conversations (`own = True`): a beat never opens a workspace a person filled, whose files it
never read through the policy. The operator sees and removes every workspace
(`persyn sandbox list|reset`).

On disk: `<data>/sandbox/<agent id>/<key>/` holds `compartment.json` (what the key stands
for, for the operator) and the workspace's contents (`tools/sandbox/isolation.py`: one archive of at
most `[sandbox] workspace_mb` for bubblewrap, a folder `files/` for the other providers).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from persyn.core.errors import ToolError
from persyn.core.records import Sensitivity
from persyn.memory.access import eligible_channels
from persyn.store.base import Provenance

__all__ = [
    "WORKSPACE_ARCHIVE",
    "WORKSPACE_FILES",
    "SandboxWorkspaces",
    "WorkspaceCompartment",
    "WorkspaceInfo",
    "workspace_compartment",
]

WORKSPACE_ARCHIVE = "workspace.tar"  # bubblewrap: the workspace between commands
WORKSPACE_FILES = "files"  # runsc, docker: a folder bound at /workspace
_COMPARTMENT = "compartment.json"
_LEGACY = "legacy"  # what an agent's folder held before compartments


@dataclass(frozen=True)
class WorkspaceCompartment:
    """Who may read a workspace: see the module docstring."""

    own: bool  # a self-initiated run's (never a conversation's)
    channels: tuple[str, ...]  # sorted; () for a run on no channel
    participant_ids: tuple[str, ...]  # sorted; () when public (whoever is present)
    sensitivity: Sensitivity
    run_id: str | None = None  # a run whose provenance surfaces nowhere: its own workspace

    @property
    def key(self) -> str:
        """The folder name: a digest (channel names may hold any character)."""
        canonical = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:24]

    def describe(self) -> dict[str, object]:
        return {
            "own": self.own,
            "channels": list(self.channels),
            "participant_ids": list(self.participant_ids),
            "sensitivity": self.sensitivity.value,
            "run_id": self.run_id,
        }


def workspace_compartment(
    provenance: Provenance,
    groups: Iterable[Sequence[str]],
    *,
    own: bool,
    run_id: str,
    agent_id: str | None = None,
) -> WorkspaceCompartment:
    """The workspace a run with `provenance` works in (`own`: a self-initiated run's;
    `run_id`: its event, used only when the provenance surfaces nowhere)."""
    sensitivity = provenance.sensitivity
    people = tuple(sorted({p for p in provenance.participant_ids if p != agent_id}))
    if sensitivity is Sensitivity.PUBLIC:
        people = ()
    channel = provenance.channel
    if channel is None:
        if sensitivity.rank >= Sensitivity.CONFIDENTIAL.rank:  # no exact channel: surfaces nowhere
            return WorkspaceCompartment(own, (), people, sensitivity, run_id=run_id)
        return WorkspaceCompartment(own, (), people, sensitivity)
    if sensitivity.rank >= Sensitivity.CONFIDENTIAL.rank:
        return WorkspaceCompartment(own, (channel,), people, sensitivity)
    return WorkspaceCompartment(own, tuple(sorted(eligible_channels(channel, groups))), people, sensitivity)


@dataclass(frozen=True)
class WorkspaceInfo:
    """One workspace, as the operator sees it."""

    agent_id: str
    key: str
    compartment: dict[str, object] | None  # None: written before compartments (or unreadable)
    size_bytes: int
    files: int | None  # entries in it; None when they cannot be counted from the host
    modified: datetime | None


class SandboxWorkspaces:
    """The agents' workspaces: `<root>/<agent id>/<key>/`. A workspace lives as long as its
    agent (`prune`) or until the operator resets it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def agent_root(self, agent_id: str) -> Path:
        if not agent_id or "/" in agent_id or agent_id.startswith("."):
            raise ToolError(f"{agent_id!r} cannot name a workspace")
        return self.root / agent_id

    def agent_ids(self) -> list[str]:
        """The agents that have workspaces here (configured or not)."""
        return sorted(_visible(self.root)) if self.root.is_dir() else []

    def of(self, agent_id: str, compartment: WorkspaceCompartment) -> Path:
        """The folder of `agent_id`'s workspace for `compartment`, made (with its
        `compartment.json`) when it is new."""
        folder = self.agent_root(agent_id) / compartment.key
        label = folder / _COMPARTMENT
        if not label.exists():
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".{_COMPARTMENT}.{os.getpid()}"
            partial.write_text(json.dumps(compartment.describe(), sort_keys=True), encoding="utf-8")
            partial.replace(label)
        return folder

    def listing(self, agent_id: str | None = None) -> list[WorkspaceInfo]:
        """Every workspace (of `agent_id`, or of all agents), oldest change first."""
        if not self.root.is_dir():
            return []
        agents = [agent_id] if agent_id is not None else self.agent_ids()
        found: list[WorkspaceInfo] = []
        for agent in agents:
            folder = self.root / agent
            if not folder.is_dir():
                continue
            found += [_info(agent, sub) for sub in sorted(folder.iterdir()) if _is_workspace(sub)]
        return sorted(found, key=lambda w: (w.modified or datetime.min.replace(tzinfo=UTC), w.key))

    def entries(self, agent_id: str, key: str) -> list[tuple[str, int]] | None:
        """What one workspace holds (path, bytes), read from its archive's headers or listed
        without following links; None when there is no such workspace."""
        folder = self.agent_root(agent_id) / _checked_key(key)
        if not _is_workspace(folder):
            return None
        archive = folder / WORKSPACE_ARCHIVE
        if archive.is_file() and not archive.is_symlink():
            try:
                with tarfile.open(archive, "r:") as opened:
                    return [(m.name.removeprefix("./"), m.size) for m in opened if m.name not in (".", "./")]
            except (OSError, tarfile.TarError):
                return []
        found: list[tuple[str, int]] = []
        files = folder / WORKSPACE_FILES
        for directory, folders, names in os.walk(files):
            for name in sorted([*names, *(f for f in folders if os.path.islink(os.path.join(directory, f)))]):
                path = os.path.join(directory, name)
                with contextlib.suppress(OSError):
                    found.append((os.path.relpath(path, files), os.lstat(path).st_size))
        return found

    def remove(self, agent_id: str, key: str | None = None) -> int:
        """Delete one workspace of `agent_id` (`key`), or all of them; returns how many went.
        Symbolic links sandboxed code left are removed, never followed."""
        folder = self.agent_root(agent_id)
        if key is not None:
            target = folder / _checked_key(key)
            existed = target.is_dir()
            shutil.rmtree(target, ignore_errors=True)
            return int(existed)
        count = sum(1 for sub in folder.iterdir() if _is_workspace(sub)) if folder.is_dir() else 0
        shutil.rmtree(folder, ignore_errors=True)
        return count

    def set_aside_legacy(self, agent_id: str) -> bool:
        """Move what an agent's folder held before workspaces had compartments (files of every
        conversation, together) into a workspace of no compartment, `legacy`: no run is given
        it; `persyn sandbox list` shows it and `reset` deletes it. True when something moved."""
        folder = self.root / agent_id
        if not folder.is_dir():
            return False
        loose = [p for p in folder.iterdir() if not (_is_workspace(p) and (p / _COMPARTMENT).is_file())]
        loose = [p for p in loose if p.name != _LEGACY]
        if not loose:
            return False
        target = folder / _LEGACY / WORKSPACE_FILES
        target.mkdir(parents=True, exist_ok=True)
        for path in loose:
            path.rename(target / path.name)  # a rename moves a symbolic link, never follows it
        return True

    def prune(self, keep: set[str]) -> list[str]:
        """Remove the workspaces of agents not in `keep`; returns their ids."""
        if not self.root.is_dir():
            return []
        gone = sorted(name for name in _visible(self.root) if name not in keep)
        for name in gone:
            shutil.rmtree(self.root / name, ignore_errors=True)
        return gone


def _checked_key(key: str) -> str:
    if not key or "/" in key or key.startswith("."):
        raise ToolError(f"{key!r} does not name a workspace")
    return key


def _visible(folder: Path) -> list[str]:
    return [
        p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
    ]


def _is_workspace(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not path.name.startswith(".")


def _info(agent_id: str, folder: Path) -> WorkspaceInfo:
    compartment: dict[str, object] | None = None
    try:
        loaded = json.loads((folder / _COMPARTMENT).read_text(encoding="utf-8"))
        compartment = loaded if isinstance(loaded, dict) else None
    except (OSError, ValueError):
        compartment = None
    archive = folder / WORKSPACE_ARCHIVE
    size, files, modified = 0, None, None
    if archive.is_file() and not archive.is_symlink():
        stat = archive.stat()
        size, modified = stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC)
        files = _archive_entries(archive)
    elif (folder / WORKSPACE_FILES).is_dir():
        size, files, modified = _folder_usage(folder / WORKSPACE_FILES)
    return WorkspaceInfo(agent_id, folder.name, compartment, size, files, modified)


def _archive_entries(archive: Path) -> int | None:
    """Entries of an archive, read header by header (nothing is extracted on the host)."""
    try:
        with tarfile.open(archive, "r:") as opened:
            return sum(1 for member in opened if member.name not in (".", "./"))
    except (OSError, tarfile.TarError):
        return None


def _folder_usage(folder: Path) -> tuple[int, int, datetime | None]:
    size, files, newest = 0, 0, 0.0
    for directory, folders, names in os.walk(folder):  # os.walk does not follow symbolic links
        links = [f for f in folders if os.path.islink(os.path.join(directory, f))]
        for name in [*names, *links]:
            try:
                stat = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            size, files, newest = size + stat.st_size, files + 1, max(newest, stat.st_mtime)
    return size, files, datetime.fromtimestamp(newest, UTC) if newest else None
